import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { encodePoints } from '../../../src/track-point/encode.js';
import { messagesOf } from '../../../support/messages.js';
import type { TrackPoint } from '../../../src/track-point/schema.js';

const point = (over: Partial<TrackPoint> = {}): TrackPoint => ({
  container_id: 'MSCU1234567',
  lat: 51.9,
  lon: 4.4,
  timestamp: '2024-05-01T12:00:00.5+02:00',
  speed: 0,
  ...over,
});
/** What a generic serializer would write: the fixed-shape one must be byte-identical. */
const reference = (p: TrackPoint) => JSON.stringify({ container_id: p.container_id, lat: p.lat, lon: p.lon, timestamp: p.timestamp, speed: p.speed });

describe('encodePoints: the value', () => {
  it.each([
    point(),
    point({ lat: -0, lon: -180, speed: 1e21 }),
    point({ lat: 1e-7, lon: 123.456789012345, speed: 5e-324 }),
    point({ container_id: 'quote " backslash \\ newline \n tab \t' }),
    point({ container_id: 'ünïcödé 集装箱 🚢' }),
    point({ container_id: 'lone \ud800 surrogate' }),
    point({ container_id: '\u0000\u001f\u2028\u007f' }),
  ])('is the bytes JSON.stringify writes for %j', (p) => {
    const value = messagesOf(encodePoints([p])).values[0]!;
    expect(value.toString('utf8')).toBe(reference(p));
    expect(value.equals(Buffer.from(reference(p)))).toBe(true);
  });
});

describe('encodePoints', () => {
  it('gives each point its key and its own value bytes, in order', () => {
    const points = [point({ container_id: 'a' }), point({ container_id: 'b', lat: -3 }), point({ container_id: 'c' })];
    const batch = encodePoints(points);
    const { keys, values } = messagesOf(batch);
    expect(batch.count).toBe(3);
    expect(keys).toEqual(['a', 'b', 'c']);
    expect(values.map((v) => v.toString())).toEqual(points.map(reference));
    expect(batch.bytes).toBe(points.reduce((n, p) => n + Buffer.byteLength(reference(p)) + 1, 0));
  });

  it('handles multi-byte characters (byte offsets differ from character offsets)', () => {
    const points = [point({ container_id: '集装箱' }), point({ container_id: 'plain' }), point({ container_id: '🚢' })];
    const batch = encodePoints(points);
    expect(messagesOf(batch).values.map((v) => v.toString('utf8'))).toEqual(points.map(reference));
    expect(batch.largestValue).toBe(Math.max(...points.map((p) => Buffer.byteLength(reference(p)))));
  });
});

describe('encodePoints: numbers, written digit by digit', () => {
  /** A GPS-like value: an integer number of units of 10^-decimals. */
  const decimal = (decimals: number) => fc.integer({ min: -(10 ** 15), max: 10 ** 15 }).map((n) => n / 10 ** decimals);
  const anyNumber = fc.oneof(
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    ...[0, 1, 2, 5, 6, 7, 8, 9].map(decimal),
    fc.constantFrom(
      0,
      -0,
      1e-6,
      -1e-6,
      1e-7,
      9e-7,
      1.5e-6,
      1e15,
      1e15 - 1,
      999999999.9999999,
      99999999.9999999,
      1e21,
      1e-300,
      5e-324,
      Number.MAX_VALUE,
      90,
      -180,
    ),
  );

  it('match JSON.stringify for any finite number in any field, up to and beyond seven decimals', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(anyNumber, anyNumber, anyNumber), { minLength: 1, maxLength: 20 }), (triples) => {
        const points = triples.map(([lat, lon, speed]) => point({ lat, lon, speed }));
        const { values } = messagesOf(encodePoints(points));
        expect(values.map(String)).toEqual(points.map(reference));
      }),
      { numRuns: 20_000 },
    );
  });
});

describe('encodePoints: the keys', () => {
  const bytesOf = (points: TrackPoint[]) => points.reduce((n, p) => n + Buffer.byteLength(reference(p)) + Buffer.byteLength(p.container_id), 0);

  it('are the container ids in UTF-8, after the values, each converted on its own', () => {
    // 'a\ud800' + '\udc00b' would join into one surrogate pair if written together: each key stays
    // what produce() made of it alone (a lone surrogate becomes U+FFFD), as before produceBatch.
    const points = [
      point({ container_id: '集装箱' }),
      point({ container_id: 'a\ud800' }),
      point({ container_id: '\udc00b' }),
      point({ container_id: 'plain' }),
    ];
    const batch = encodePoints(points);
    expect(messagesOf(batch).keys).toEqual(points.map((p) => Buffer.from(p.container_id).toString()));
    expect(messagesOf(batch).keys.slice(1, 3)).toEqual(['a\ufffd', '\ufffdb']);
    expect(batch.bytes).toBe(points.reduce((n, p) => n + Buffer.byteLength(reference(p)) + Buffer.from(p.container_id).length, 0));
    expect(batch.data.length).toBe(batch.bytes);
  });

  it('keep their offsets when a larger request follows a smaller one (the buffers grow)', () => {
    encodePoints([point()]);
    const points = Array.from({ length: 5000 }, (_, i) => point({ container_id: `container-${i}`, lat: i / 100 }));
    const batch = encodePoints(points);
    const { keys, values } = messagesOf(batch);
    expect(keys).toEqual(points.map((p) => p.container_id));
    expect(values.map(String)).toEqual(points.map(reference));
    expect(batch.bytes).toBe(bytesOf(points));
  });
});
