// The fast path must give zod's answer: the same points accepted, the same output, for any input.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { compileFastPath, compileFields } from '../../../src/track-point/fast-path.js';
import { TrackPointSchema, validatePoints, type TrackPoint } from '../../../src/track-point/schema.js';

const zod = z.array(TrackPointSchema);

// Values around every bound of the schema, of every JSON type, and well-formed ones.
const anyJson = fc.oneof(fc.constant(null), fc.boolean(), fc.string(), fc.double(), fc.array(fc.integer(), { maxLength: 2 }), fc.object({ maxDepth: 1 }));
const number = fc.oneof(
  fc.double(), // NaN and ±Infinity included
  fc.constantFrom(-180.0000001, -180, -90.0000001, -90, -0, 0, 5e-324, 90, 90.0000001, 180, 180.0000001, -1e-300),
  fc.double({ min: -200, max: 200, noNaN: true }),
);
const containerId = fc.oneof(
  fc.string({ minLength: 0, maxLength: 70 }),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc.constantFrom('', 'x'.repeat(64), 'x'.repeat(65), '\ud800'),
);
const timestamp = fc.oneof(
  fc.constantFrom('2024-05-01T12:00:00Z', '2024-02-30T12:00:00Z', '1990-12-31T23:59:60Z', '2024-05-01 12:00:00Z', ''),
  fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
  fc.string(),
);
const field = <T>(valid: fc.Arbitrary<T>) => fc.oneof({ weight: 4, arbitrary: valid }, { weight: 1, arbitrary: anyJson });
const point = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record(
      { container_id: field(containerId), lat: field(number), lon: field(number), timestamp: field(timestamp), speed: field(number), extra: anyJson },
      { requiredKeys: [] },
    ),
  },
  { weight: 1, arbitrary: anyJson },
);
// Mostly valid points, so that whole requests pass too.
const validPoint = fc.record(
  {
    container_id: fc.string({ minLength: 1, maxLength: 64 }),
    lat: fc.double({ min: -90, max: 90, noNaN: true }),
    lon: fc.double({ min: -180, max: 180, noNaN: true }),
    timestamp: fc.date({ noInvalidDate: true, min: new Date(0), max: new Date(4e12) }).map((d) => d.toISOString()),
    speed: fc.option(fc.double({ min: 0, max: 1e6, noNaN: true }), { nil: undefined }),
  },
  { requiredKeys: ['container_id', 'lat', 'lon', 'timestamp'] },
);

/** Through JSON, as a request body arrives (undefined fields vanish, -0 stays -0 in a double). */
const asParsed = (v: unknown) => JSON.parse(JSON.stringify(v) ?? 'null') as unknown[];

describe.each([
  ['generated code', true],
  ['the interpreted loop', false],
])('compileFastPath(TrackPointSchema), %s', (_name, generate) => {
  const fast = compileFastPath<TrackPoint>(TrackPointSchema, { generate });

  it("accepts exactly the requests zod accepts, with zod's output", () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(point, validPoint), { minLength: 1, maxLength: 4 }), (raw) => {
        const input = asParsed(raw);
        const reference = zod.safeParse(input);
        const got = fast(input);
        expect(got !== null).toBe(reference.success);
        if (got !== null) expect(got).toStrictEqual(reference.data);
      }),
      { numRuns: 20_000 },
    );
  });

  it('passes NaN and infinities (not JSON, but JSON.parse makes 1e400 Infinity) to zod', () => {
    // speed has no upper bound: only the finiteness rule stops Infinity there.
    const p = { container_id: 'c', lat: 1, lon: 2, timestamp: '2024-05-01T12:00:00Z' };
    for (const key of ['lat', 'lon', 'speed']) {
      for (const bad of [NaN, Infinity, -Infinity]) {
        expect(fast([{ ...p, [key]: bad }])).toBeNull();
        expect(zod.safeParse([{ ...p, [key]: bad }]).success).toBe(false);
      }
    }
    expect(fast(JSON.parse(`[{"container_id":"c","lat":1,"lon":0,"timestamp":"2024-05-01T12:00:00Z","speed":1e400}]`) as unknown[])).toBeNull();
  });
});

describe('compileFastPath', () => {
  it('leaves the error details to zod: validatePoints answers as zod does', () => {
    const result = validatePoints([{ container_id: 'c', lat: 91, lon: 0, timestamp: '2024-05-01T12:00:00Z' }]);
    expect(result).toEqual({ ok: false, invalidPoints: 1, details: [{ index: 0, field: 'lat', message: 'must be between -90 and 90' }] });
  });

  it('refuses, at start-up, a schema rule it does not know, naming the field', () => {
    expect(() => compileFastPath(z.object({ email: z.string().email() }))).toThrow(/field email.*does not know check string_format/);
    expect(() => compileFastPath(z.object({ flag: z.boolean() }))).toThrow(/field flag.*does not know type boolean/);
    expect(() => compileFastPath(z.object({ n: z.number().multipleOf(2) }))).toThrow(/field n.*does not know check multiple_of/);
    expect(() => compileFastPath(z.object({ ['__proto__']: z.number() }))).toThrow(/does not know the key __proto__/);
    expect(() => compileFastPath(z.object({ s: z.string().superRefine(() => undefined) }))).toThrow(/field s.*custom check other than \.refine\(\)/);
  });

  it('checks a string field on its bytes when every refinement carries a bytes form, and only then', () => {
    const upper = Object.assign((v: string) => v === v.toUpperCase(), {
      ascii: (b: Uint8Array, from: number, to: number) => b.subarray(from, to).every((c) => c < 97 || c > 122),
    });
    const noForm = (v: string) => v.length > 0;
    const schema = z.object({ a: z.string().min(2).max(4).refine(upper), b: z.string().refine(upper).refine(noForm), c: z.string().max(3), n: z.number() });
    const [a, b, c, n] = compileFields(schema);
    expect([b?.acceptsAscii, n?.acceptsAscii]).toEqual([null, null]);
    const body = Buffer.from('xABCDabcx');
    // The string field's length bounds, then its refinement, on body[from, to).
    for (const [from, to] of [
      [1, 2],
      [1, 3],
      [1, 5],
      [1, 6],
      [3, 6],
      [5, 8],
    ] as const) {
      const text = body.toString('latin1', from, to);
      expect(a?.acceptsAscii?.(body, from, to), text).toBe(schema.shape.a.safeParse(text).success);
      expect(c?.acceptsAscii?.(body, from, to), text).toBe(schema.shape.c.safeParse(text).success);
    }
  });

  it('keeps the tightest of several bounds on one side, as zod applies them all', () => {
    const schema = z.object({ n: z.number().min(0).positive().max(10).lt(10).min(-5), s: z.string().min(2).min(1).max(3).max(5) });
    const fast = compileFastPath<unknown>(schema);
    for (const n of [-1, 0, 1e-9, 9.99, 10, 11]) {
      for (const str of ['a', 'ab', 'abc', 'abcd']) {
        expect(fast([{ n, s: str }]) !== null).toBe(schema.safeParse({ n, s: str }).success);
      }
    }
  });
});

describe('validatePoints: the refusal of a request', () => {
  const points = z.array(TrackPointSchema);
  it("says what zod's own safeParse says, issue for issue, for any points (it runs the schema without safeParse's failure object)", () => {
    fc.assert(
      fc.property(fc.array(point, { minLength: 1, maxLength: 6 }), (raw) => {
        const input = asParsed(raw);
        const ours = validatePoints(input);
        const zods = points.safeParse(input);
        if (zods.success) {
          expect(ours).toEqual({ ok: true, points: zods.data });
          return;
        }
        const issues = zods.error.issues.slice(0, 100);
        expect(ours).toEqual({
          ok: false,
          invalidPoints: new Set(zods.error.issues.map((i) => i.path[0])).size,
          details: issues.map((i) =>
            i.path[1] === undefined ? { index: i.path[0], message: i.message } : { index: i.path[0], field: String(i.path[1]), message: i.message },
          ),
        });
      }),
      { numRuns: 2000 },
    );
  });
});
