// Property-based tests (fast-check) of the validator and the encoder: generated valid points are
// accepted and forwarded byte-exactly in the normalized form of the README's "The Kafka messages"; each single mutation that
// breaks one rule is rejected with the right detail; arbitrary bodies never throw.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config.js';
import type { TrackAnswer } from '../../../src/http/track-answers.js';
import { TrackHandler } from '../../../src/http/track-handler.js';
import { createWorkerMetrics } from '../../../src/metrics/metrics.js';
import { type EncodedPoints } from '../../../src/track-point/encode.js';
import type { PointSink } from '../../../src/write-ahead/acceptance.js';
import { messagesOf } from '../../../support/messages.js';

const DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const pad = (n: number, w = 2) => String(n).padStart(w, '0');

/** RFC 3339 date-times built from valid parts, in every allowed spelling. */
const timestamp = fc
  .record({
    year: fc.integer({ min: 0, max: 9999 }),
    month: fc.integer({ min: 1, max: 12 }),
    dayFraction: fc.double({ min: 0, max: 0.999, noNaN: true }),
    hour: fc.integer({ min: 0, max: 23 }),
    minute: fc.integer({ min: 0, max: 59 }),
    second: fc.integer({ min: 0, max: 59 }),
    fraction: fc.option(fc.stringMatching(/^[0-9]{1,12}$/), { nil: undefined }),
    t: fc.constantFrom('T', 't'),
    offset: fc.oneof(
      fc.constantFrom('Z', 'z'),
      fc.tuple(fc.constantFrom('+', '-'), fc.integer({ min: 0, max: 23 }), fc.integer({ min: 0, max: 59 })).map(([s, h, m]) => `${s}${pad(h)}:${pad(m)}`),
    ),
  })
  .map((p) => {
    const leap = (p.year % 4 === 0 && p.year % 100 !== 0) || p.year % 400 === 0;
    const days = p.month === 2 && leap ? 29 : DAYS[p.month - 1]!;
    const day = 1 + Math.floor(p.dayFraction * days);
    const frac = p.fraction === undefined ? '' : `.${p.fraction}`;
    return `${pad(p.year, 4)}-${pad(p.month)}-${pad(day)}${p.t}${pad(p.hour)}:${pad(p.minute)}:${pad(p.second)}${frac}${p.offset}`;
  });

const validPoint = fc.record(
  {
    container_id: fc.string({ minLength: 1, maxLength: 64, unit: 'grapheme-ascii' }),
    lat: fc.double({ min: -90, max: 90, noNaN: true }),
    lon: fc.double({ min: -180, max: 180, noNaN: true }),
    timestamp,
    speed: fc.double({ min: 0, max: 1e6, noNaN: true }),
  },
  { requiredKeys: ['container_id', 'lat', 'lon', 'timestamp'] },
);

class Sink implements PointSink {
  batch: ReturnType<typeof messagesOf> | null = null;
  admission(): null {
    return null;
  }
  accept(batch: EncodedPoints): null {
    // The batch views scratch space reused by the next request: copy its messages now.
    this.batch = messagesOf(batch);
    return null;
  }
  readiness() {
    return { ready: true, reason: 'ok' };
  }
}
/** A body taken by POST /track's handler, as its socket would hand it over: its answer, and what reached the write-ahead path. */
const config = loadConfig({ MAX_BODY_BYTES: String(1 << 20), MAX_POINTS: '10000' });
const metrics = createWorkerMetrics('properties');
const post = (body: string | Buffer) => {
  const sink = new Sink();
  let out: TrackAnswer | null = null;
  new TrackHandler(config, sink, metrics).take(
    { started: 0, aborted: () => false, answer: (a) => void (out = a), client: () => ({ address: '192.0.2.7', apiKeyName: null }) },
    Buffer.isBuffer(body) ? body : Buffer.from(body),
    true,
    false,
    false,
  );
  if (out === null) throw new Error('no answer');
  return { out: out as TrackAnswer, sink };
};
const normalized = (p: Record<string, unknown>) =>
  JSON.stringify({ container_id: p.container_id, lat: p.lat, lon: p.lon, timestamp: p.timestamp, speed: p.speed ?? 0 });

describe('generated valid points', () => {
  it('are accepted and forwarded byte-exactly in the normalized form', () => {
    fc.assert(
      fc.property(fc.array(validPoint, { minLength: 1, maxLength: 20 }), (points) => {
        const { out, sink } = post(JSON.stringify(points));
        expect(out.status).toBe(202);
        expect(sink.batch!.keys).toEqual(points.map((p) => p.container_id));
        expect(sink.batch!.values.map((v) => v.toString('utf8'))).toEqual(points.map((p) => normalized(JSON.parse(JSON.stringify(p)))));
      }),
      { numRuns: 500 },
    );
  });
});

// Each mutation breaks exactly one rule of one field, and names the detail it must produce.
const mutations: [string, (p: Record<string, unknown>) => void, { field: string; message: string }][] = [
  ['lat above 90', (p) => (p.lat = 90 + 1e-6 + Math.random() * 100), { field: 'lat', message: 'must be between -90 and 90' }],
  ['lat below -90', (p) => (p.lat = -90 - 1e-6 - Math.random() * 100), { field: 'lat', message: 'must be between -90 and 90' }],
  ['lon above 180', (p) => (p.lon = 180.000001), { field: 'lon', message: 'must be between -180 and 180' }],
  ['lon below -180', (p) => (p.lon = -181), { field: 'lon', message: 'must be between -180 and 180' }],
  ['negative speed', (p) => (p.speed = -0.5), { field: 'speed', message: 'must be at least 0' }],
  ['null speed', (p) => (p.speed = null), { field: 'speed', message: 'must be a number' }],
  ['lat as a string', (p) => (p.lat = String(p.lat)), { field: 'lat', message: 'must be a number' }],
  ['missing container_id', (p) => delete p.container_id, { field: 'container_id', message: 'is required' }],
  ['missing timestamp', (p) => delete p.timestamp, { field: 'timestamp', message: 'is required' }],
  ['empty container_id', (p) => (p.container_id = ''), { field: 'container_id', message: 'must not be empty' }],
  ['65-character container_id', (p) => (p.container_id = 'x'.repeat(65)), { field: 'container_id', message: 'must be at most 64 characters' }],
  ['31 April', (p) => (p.timestamp = '2024-04-31T00:00:00Z'), { field: 'timestamp', message: 'must be an RFC 3339 date-time such as 2024-05-01T12:00:00Z' }],
  [
    'no offset',
    (p) => (p.timestamp = String(p.timestamp).replace(/([Zz]|[+-]\d\d:\d\d)$/, '')),
    { field: 'timestamp', message: 'must be an RFC 3339 date-time such as 2024-05-01T12:00:00Z' },
  ],
];

describe('a single broken rule', () => {
  it.each(mutations)('%s is rejected with the right detail, and nothing is produced', (_name, mutate, detail) => {
    fc.assert(
      fc.property(fc.array(validPoint, { minLength: 1, maxLength: 10 }), fc.nat(), (points, pick) => {
        const index = pick % points.length;
        const body = JSON.parse(JSON.stringify(points)) as Record<string, unknown>[];
        mutate(body[index]!);
        const { out, sink } = post(JSON.stringify(body));
        expect(out.status).toBe(400);
        expect(JSON.parse(out.body.toString())).toEqual({ error: 'validation_failed', message: '1 invalid track point', details: [{ index, ...detail }] });
        expect(sink.batch).toBeNull();
      }),
      { numRuns: 100 },
    );
  });
});

describe('arbitrary bodies', () => {
  it('never throw and always get a JSON answer with a 2xx or 4xx status', () => {
    const body = fc.oneof(
      fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)),
      fc.jsonValue().map((v) => JSON.stringify(v) ?? ''),
      fc
        .array(fc.dictionary(fc.constantFrom('container_id', 'lat', 'lon', 'timestamp', 'speed', '__proto__', 'x'), fc.jsonValue()))
        .map((v) => JSON.stringify(v)),
      fc.string().map((s) => `\ufeff${s}`),
    );
    fc.assert(
      fc.property(body, (b) => {
        const { out } = post(b);
        expect([202, 400, 413]).toContain(out.status);
        expect(() => JSON.parse(out.body.toString())).not.toThrow();
      }),
      { numRuns: 3000 },
    );
  });

  it.each([
    ['deep nesting', '['.repeat(100_000) + ']'.repeat(100_000)],
    ['1e400', '[{"container_id":"c","lat":1e400,"lon":0,"timestamp":"2024-05-01T12:00:00Z"}]'],
    ['-0', '[{"container_id":"c","lat":-0,"lon":-0,"timestamp":"2024-05-01T12:00:00Z","speed":-0}]'],
    ['__proto__ keys', '[{"__proto__":{"lat":1},"container_id":"c","lat":1,"lon":2,"timestamp":"2024-05-01T12:00:00Z"}]'],
  ])('%s gets a clear answer', (_name, body) => {
    const { out, sink } = post(body);
    expect([202, 400]).toContain(out.status);
    if (out.status === 202) expect(sink.batch!.values.map(String)).toEqual([expect.stringContaining('"lat":')]);
  });
});
