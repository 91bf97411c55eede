// The single pass must never change an answer: whatever body it takes, the general path (JSON.parse,
// the schema, encode.ts) takes too, with the same messages byte for byte; whatever body it refuses,
// the general path refuses with the same details; and it must take the bodies real clients send, and
// refuse the invalid ones a bad firmware sends, or it is dead code.
import { isUtf8 } from 'node:buffer';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { encodePoints, type EncodedPoints } from '../../../src/track-point/encode.js';
import { messagesOf } from '../../../support/messages.js';
import { MAX_ERROR_DETAILS, TrackPointSchema, validatePoints } from '../../../src/track-point/schema.js';
import { compileSinglePass, singlePass, type RefusedPoints } from '../../../src/track-point/single-pass.js';
import { encodeRegistryPoints, registryFraming, type RegistryFraming } from '../../../src/track-point/registry-encode.js';
import type { RegistryFormat } from '../../../src/track-point/registry-schemas.js';

const MAX_POINTS = 6;

/**
 * What handleTrackBody's general path makes of a body, in the single pass's terms: the messages, the
 * refusal of its points, or null for any other answer.
 */
function general(body: Buffer, maxPoints: number): EncodedPoints | RefusedPoints | null {
  if (!isUtf8(body)) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    return null;
  }
  if (!Array.isArray(parsed) || parsed.length === 0 || parsed.length > maxPoints) return null;
  const result = validatePoints(parsed);
  return result.ok ? encodePoints(result.points) : { ...result, count: parsed.length };
}

/** The general path's messages in a registry format, or null when it does not take the body. */
function generalFramed(body: Buffer, maxPoints: number, framing: RegistryFraming): EncodedPoints | null {
  const result = general(body, maxPoints);
  if (result === null || 'details' in result) return null;
  const points = validatePoints(JSON.parse(body.toString('utf8')) as unknown[]);
  return points.ok ? encodeRegistryPoints(points.points, framing) : null;
}

/** The single pass's answer: its messages as plain data, or its refusal. */
const encodeValidBody = (body: Uint8Array, maxPoints: number): EncodedPoints | null => takenBatch(singlePass(body, maxPoints));
const takenBatch = (result: EncodedPoints | RefusedPoints | null): EncodedPoints | null => (result === null || 'details' in result ? null : result);
const refusal = (result: EncodedPoints | RefusedPoints | null): RefusedPoints | null => (result !== null && 'details' in result ? result : null);

/** The messages as plain data, so that two results can be compared after the scratch is reused. */
function snapshot(batch: EncodedPoints | null) {
  if (batch === null) return null;
  const { keys, values } = messagesOf(batch);
  return { count: batch.count, bytes: batch.bytes, largestValue: batch.largestValue, keys, values: values.map((v) => v.toString('latin1')) };
}

/**
 * One of the choices, with the given weights and without fast-check's bias towards small values, so
 * that the rates below hold as written. They are tuned so that a body, with its dozens of fields and
 * whitespace slots, is still accepted about a quarter of the time (the first test checks the mix).
 */
function pick<T>(...choices: [weight: number, arbitrary: fc.Arbitrary<T>][]): fc.Arbitrary<T> {
  const total = choices.reduce((n, [w]) => n + w, 0);
  return fc.noBias(fc.integer({ min: 0, max: total - 1 })).chain((k) => {
    for (const [w, arbitrary] of choices) {
      if (k < w) return arbitrary;
      k -= w;
    }
    throw new Error('unreachable');
  });
}

const ws = pick(
  [300, fc.constant('')],
  [50, fc.constantFrom(' ', '\n', '\t', '\r\n  ')],
  [1, fc.constant('\u00a0')], // not JSON whitespace
);

/** Ways to write a number: as JSON.stringify does, and as other clients and hands do. */
const numberText = (x: number) =>
  pick(
    [20, fc.constant(JSON.stringify(x))],
    [
      1,
      fc.constantFrom(
        x.toFixed(1),
        x.toFixed(7),
        x.toFixed(12),
        x.toExponential(),
        x.toExponential().toUpperCase(),
        x.toExponential().replace('e+', 'e'),
        x.toPrecision(17),
        String(-x),
        x === 0 ? '-0' : `${x}0`,
        x === 0 ? '0.000' : `0${x}`, // a leading zero: not JSON
      ),
    ],
  );
const coordinate = (range: number, min: number) =>
  pick(
    [12, fc.integer({ min: min * 1e6, max: range * 1e6 }).map((n) => n / 1e6)], // what a GPS receiver sends
    [4, fc.double({ min: min - 1, max: range + 1, noNaN: true })],
    [1, fc.constantFrom(0, -0, 1e-7, 1e-6, 0.000001234, range, min, range + 1e-9, 123456789012345, 1e21)],
  );
const numberField = (range: number, min = -range) =>
  pick(
    [200, coordinate(range, min).chain(numberText)],
    [1, fc.constantFrom('"1"', 'null', 'true', '1e400', '-', '1.', '.5', '1.5.5', '01', '1e', '[1]', '{}')],
  );
const stringText = (s: string) =>
  fc.constantFrom(
    JSON.stringify(s),
    JSON.stringify(s).replace(/a/g, '\\u0061'), // an escape for a plain letter
    JSON.stringify(s).replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`),
  );
const containerId = pick([12, fc.stringMatching(/^[A-Z]{4}[0-9]{7}$/)], [2, fc.string({ maxLength: 66 })], [1, fc.string({ unit: 'grapheme', maxLength: 8 })]);
const timestamp = pick(
  [20, fc.date({ noInvalidDate: true, min: new Date(0), max: new Date(4e12) }).map((d) => d.toISOString())],
  [1, fc.constantFrom('2024-02-30T12:00:00Z', '2024-05-01t12:00:00.5+02:00', '2024-05-01 12:00:00Z', '')],
);
const stringField = (value: fc.Arbitrary<string>) => pick([200, value.chain(stringText)], [1, fc.constantFrom('5', 'null', '"\\x"', '"\u0001"', '"a')]);
const unknownValue = pick(
  [60, fc.jsonValue({ maxDepth: 1 }).map((v) => JSON.stringify(v))],
  [30, fc.constantFrom('"\\ud800"', '"\\"q"', '1E+2', '"é"')],
  [1, fc.constant('nul')],
);

const known = {
  container_id: stringField(containerId),
  lat: numberField(90),
  lon: numberField(180),
  timestamp: stringField(timestamp),
  speed: numberField(100, 0),
};
type Entry = [name: string, value: string];
const rarely = <T>(arbitrary: fc.Arbitrary<T>) => pick<T | null>([40, fc.constant(null)], [1, arbitrary]);
/** The fields of one point as written: now and then one missing, unknown ones, a duplicate, in any order. */
const entries: fc.Arbitrary<Entry[]> = fc
  .tuple(
    fc.record(known, { requiredKeys: ['container_id', 'lat', 'lon', 'timestamp'] }),
    rarely(fc.constantFrom(...Object.keys(known))),
    fc.array(fc.tuple(fc.constantFrom('extra', '__proto__', 'heading', 'lat ', 'LAT', 'speed\\u0000'), unknownValue), { maxLength: 2 }),
    rarely(fc.tuple(fc.constantFrom(...Object.keys(known)), fc.constantFrom('1', '"x"'))),
    fc.boolean(),
  )
  .chain(([fields, missing, unknowns, duplicate, shuffle]) => {
    const all: Entry[] = [...Object.entries(fields).filter(([name]) => name !== missing), ...unknowns];
    if (duplicate !== null) all.push(duplicate);
    return shuffle ? fc.shuffledSubarray(all, { minLength: all.length }) : fc.constant(all);
  });
const objectText = fc.tuple(entries, fc.array(ws, { minLength: 40, maxLength: 40 })).map(([fields, spaces]) => {
  const w = (k: number) => spaces[k % spaces.length];
  return `{${w(0)}${fields.map(([name, value], k) => `"${name}"${w(4 * k + 1)}:${w(4 * k + 2)}${value}${w(4 * k + 3)}`).join(',')}}`;
});
const pointText = pick([200, objectText], [1, fc.constantFrom('null', '1', '[]', '"p"', '{')]);
const body = fc
  .tuple(fc.array(pointText, { maxLength: MAX_POINTS + 1 }), ws, ws, pick([100, fc.constant('')], [1, fc.constantFrom(',', ']', 'x', '\u0000')]))
  .map(([points, before, after, trailing]) => Buffer.from(`${before}[${points.join(`,${after}`)}]${after}${trailing}`));

/** Valid points as JSON.stringify writes them: printable-ASCII ids and any double in range. */
const validPoints = fc.array(
  fc.record(
    {
      container_id: fc.stringMatching(/^[\x20-\x7e]{1,64}$/).filter((s) => !s.includes('"') && !s.includes('\\')),
      lat: fc.double({ min: -90, max: 90, noNaN: true }),
      lon: fc.oneof(
        fc.double({ min: -180, max: 180, noNaN: true }),
        fc.integer({ min: -180e6, max: 180e6 }).map((n) => n / 1e6),
      ),
      timestamp: fc.date({ noInvalidDate: true, min: new Date(0), max: new Date(4e12) }).map((d) => d.toISOString()),
      speed: fc.double({ min: 0, max: 1e25, noNaN: true }),
    },
    { requiredKeys: ['container_id', 'lat', 'lon', 'timestamp'] },
  ),
  { minLength: 1, maxLength: MAX_POINTS },
);

describe('the single pass', () => {
  it('takes only bodies the general path accepts, with the same messages byte for byte, and refuses only bodies it refuses, with the same details', () => {
    let accepted = 0;
    let taken = 0;
    let refusedThere = 0;
    let refusedHere = 0;
    fc.assert(
      fc.property(body, (b) => {
        const generalResult = general(b, MAX_POINTS);
        // Copied now: the single pass writes into the same scratch space.
        const reference = snapshot(takenBatch(generalResult));
        const referenceRefusal = refusal(generalResult);
        const result = singlePass(b, MAX_POINTS);
        const got = snapshot(takenBatch(result));
        const gotRefusal = refusal(result);
        if (reference !== null) accepted++;
        if (referenceRefusal !== null) refusedThere++;
        if (got !== null) {
          taken++;
          expect(got).toStrictEqual(reference);
        }
        if (gotRefusal !== null) {
          refusedHere++;
          expect(gotRefusal).toStrictEqual(referenceRefusal);
        }
      }),
      { numRuns: 30_000 },
    );
    // The generator must give every kind of body, and the single pass take some of the accepted and
    // refuse some of the refused itself (most generated refusals also hold an escape, a value of
    // another type or a duplicate somewhere, which it leaves to the general path).
    expect(accepted).toBeGreaterThan(3_000);
    expect(accepted).toBeLessThan(27_000);
    expect(taken).toBeGreaterThan(1_000);
    expect(refusedThere).toBeGreaterThan(3_000);
    expect(refusedHere).toBeGreaterThan(300);
  });

  it("takes every body of valid points that JSON.stringify writes, with the general path's messages", () => {
    fc.assert(
      fc.property(validPoints, (points) => {
        const b = Buffer.from(JSON.stringify(points));
        const got = snapshot(encodeValidBody(b, MAX_POINTS));
        expect(got).not.toBeNull();
        expect(got).toStrictEqual(snapshot(takenBatch(general(b, MAX_POINTS))));
      }),
      { numRuns: 10_000 },
    );
  });

  it.each(['avro', 'protobuf', 'json-schema'] as RegistryFormat[])(
    "in %s: takes the bodies it takes in JSON, with the general path's registry messages byte for byte, and refuses the same",
    (format) => {
      const framing = registryFraming(format, 0x01020304);
      const framed = compileSinglePass(TrackPointSchema, 'container_id', { generate: true, format });
      let taken = 0;
      fc.assert(
        fc.property(
          fc.oneof(
            body,
            validPoints.map((points) => Buffer.from(JSON.stringify(points))),
          ),
          (b) => {
            const json = snapshot(encodeValidBody(b, MAX_POINTS));
            const jsonRefusal = refusal(singlePass(b, MAX_POINTS));
            const reference = snapshot(generalFramed(b, MAX_POINTS, framing));
            const result = framed(b, MAX_POINTS, framing);
            const got = snapshot(takenBatch(result));
            expect(got === null).toBe(json === null);
            expect(refusal(result)).toStrictEqual(jsonRefusal);
            if (got !== null) {
              taken++;
              expect(got).toStrictEqual(reference);
              expect(got.keys).toStrictEqual(json?.keys);
              // Confluent's wire format: magic byte 0, then the schema id big-endian.
              for (const v of got.values) expect(v.slice(0, 5)).toBe('\x00\x01\x02\x03\x04');
            }
          },
        ),
        { numRuns: 5_000 },
      );
      expect(taken).toBeGreaterThan(1_000);
    },
  );

  it('takes the same bodies with the same messages without generated code (a process that forbids it)', () => {
    const interpreted = compileSinglePass(TrackPointSchema, 'container_id', { generate: false });
    fc.assert(
      fc.property(body, (b) => {
        const own = interpreted(b, MAX_POINTS);
        expect(snapshot(takenBatch(own))).toStrictEqual(snapshot(encodeValidBody(b, MAX_POINTS)));
        expect(refusal(own)).toStrictEqual(refusal(singlePass(b, MAX_POINTS)));
      }),
      { numRuns: 5_000 },
    );
  });

  it("hands on in place, without a copy, the points JSON.stringify wrote of zod's output", () => {
    fc.assert(
      fc.property(validPoints, (points) => {
        // zod's output: every field, in the schema's order, speed filled in.
        const complete = points.map((p) => ({ container_id: p.container_id, lat: p.lat, lon: p.lon, timestamp: p.timestamp, speed: p.speed ?? 0 }));
        const b = Buffer.from(JSON.stringify(complete));
        const got = encodeValidBody(b, MAX_POINTS);
        expect(got).not.toBeNull();
        // The messages are offsets into the body's own memory: nothing was written anew.
        expect(got?.data.buffer).toBe(b.buffer);
        expect(got?.data.byteOffset).toBe(b.byteOffset);
        expect(snapshot(got)).toStrictEqual(snapshot(takenBatch(general(b, MAX_POINTS))));
      }),
      { numRuns: 5_000 },
    );
  });

  it.each([
    [
      'spaces after separators (Python json.dumps)',
      '[{"container_id": "MSCU1234567", "lat": 51.9, "lon": 4.4, "timestamp": "2024-05-01T12:00:00Z", "speed": 3.0}]',
    ],
    ['fields in another order, speed absent', '[{"timestamp":"2024-05-01T12:00:00Z","lon":4.4,"lat":51.9,"container_id":"MSCU1234567"}]'],
    [
      'pretty-printed, with an unknown field',
      '[\n  {\n    "container_id": "MSCU1234567",\n    "lat": 51.90,\n    "lon": 4.400,\n    "timestamp": "2024-05-01T12:00:00Z",\n    "heading": 270\n  }\n]',
    ],
    ['exponents and negative zero', '[{"container_id":"MSCU1234567","lat":5.19E1,"lon":-0,"timestamp":"2024-05-01T12:00:00Z","speed":1e-7}]'],
  ])('takes a body of valid points written otherwise: %s', (_name, text) => {
    const b = Buffer.from(text);
    const got = snapshot(encodeValidBody(b, MAX_POINTS));
    expect(got).not.toBeNull();
    expect(got).toStrictEqual(snapshot(takenBatch(general(b, MAX_POINTS))));
  });

  it.each([
    ['16 digits, its double known from them', '4.399900000000001', '4.4', '3'],
    ['17 digits, the first guess an ulp off', '36.613301470728075', '-1.0035926367430559', '63.804395324743666'],
    ['17 digits, the guess from the digits another double', '51.9', '-51.900099999999995', '0'],
    ['17 digits, not the shortest text of its double', '4.3999999999999999', '0.30000000000000004', '12345678901234567'],
    ['integers beyond 2^53', '1', '2', '9007199254740993'],
  ])('reads numbers of many digits to the double JSON.parse gives: %s', (_name, lat, lon, speed) => {
    const b = Buffer.from(`[{"container_id":"MSCU1234567","lat":${lat},"lon":${lon},"timestamp":"2024-05-01T12:00:00Z","speed":${speed}}]`);
    const got = snapshot(encodeValidBody(b, MAX_POINTS));
    expect(got).not.toBeNull();
    expect(got).toStrictEqual(snapshot(takenBatch(general(b, MAX_POINTS))));
  });

  it.each([
    ['a latitude out of range', '[{"container_id":"MSKU-flood","lat":95,"lon":4.4,"timestamp":"2024-05-01T12:00:00Z"}]'],
    [
      'several fields of several points, one missing',
      '[{"container_id":"","lat":-91,"lon":4.4,"timestamp":"2024-05-01T12:00:00Z"},{"container_id":"a","lat":1,"lon":1,"timestamp":"2024-05-01T12:00:00Z"},{"lon":181,"lat":1e400,"timestamp":"yesterday","speed":-1}]',
    ],
    [
      'a point written as its message value, but for a negative speed',
      '[{"container_id":"MSKU1","lat":1,"lon":2,"timestamp":"2024-05-01T12:00:00Z","speed":-3}]',
    ],
  ])('refuses a body of points it reads whole, as the general path does: %s', (_name, text) => {
    const b = Buffer.from(text);
    const got = refusal(singlePass(b, MAX_POINTS));
    expect(got).not.toBeNull();
    expect(got).toStrictEqual(refusal(general(b, MAX_POINTS)));
  });

  it('counts every invalid point and keeps the first details, as the general path does, in a large body', () => {
    const point = (i: number) => `{"container_id":"c${i}","lat":${i % 2 === 0 ? 95 : 1},"lon":${i % 3 === 0 ? -200 : 1},"timestamp":"2024-05-01T12:00:00Z"}`;
    const b = Buffer.from(`[${Array.from({ length: 400 }, (_, i) => point(i)).join(',')}]`);
    const got = refusal(singlePass(b, 1000));
    expect(got?.details).toHaveLength(MAX_ERROR_DETAILS);
    expect(got).toStrictEqual(refusal(general(b, 1000)));
    expect(got?.invalidPoints).toBe(267); // even or a multiple of 3
  });

  it('leaves to the general path what it decides: errors, escapes, non-ASCII, duplicates, limits', () => {
    const valid = '{"container_id":"MSCU1234567","lat":51.9,"lon":4.4,"timestamp":"2024-05-01T12:00:00Z"}';
    for (const text of [
      '[]',
      `[${valid},${valid.replace('51.9', '"91"')}]`, // a value of another type: JSON.parse, then zod
      `[${valid},${valid.replace('51.9', '91')}`, // invalid point, then the body ends early: invalid_json
      valid.replace('MSCU', 'M\\u0053CU'),
      `[${valid.replace('MSCU', 'MSCÜ')}]`,
      `[${valid.replace('"lat":51.9', '"lat":1,"lat":51.9')}]`, // JSON.parse keeps the last
      `[${valid.replace('}', ',"meta":{"a":1}}')}]`,
      `[${Array(MAX_POINTS + 1)
        .fill(valid)
        .join(',')}]`,
    ]) {
      expect(singlePass(Buffer.from(text), MAX_POINTS), text).toBeNull();
    }
  });

  it('reads a view into a larger buffer from its own offset', () => {
    const text = '[{"container_id":"MSCU1234567","lat":51.9,"lon":4.4,"timestamp":"2024-05-01T12:00:00Z","speed":2}]';
    const memory = Buffer.from(`garbage${text}garbage`);
    const view = new Uint8Array(memory.buffer, memory.byteOffset + 7, text.length);
    expect(snapshot(encodeValidBody(view, MAX_POINTS))).toStrictEqual(snapshot(takenBatch(general(Buffer.from(text), MAX_POINTS))));
  });

  it('refuses, at start-up, a key field that is not a string field of the schema', () => {
    expect(() => compileSinglePass(z.object({ id: z.number() }), 'id')).toThrow(/message key id is not a string field/);
    expect(() => compileSinglePass(z.object({ id: z.string() }), 'name')).toThrow(/message key name is not a string field/);
  });
});
