// POST /track's body turned into messages, or into why it is refused: every refusal of a body (its
// code, message and details), the single pass and the general path alike. The answers themselves are
// track-answers.test.ts's; the integration tests run the same paths against uWebSockets.js.
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { decodeTrackBody, NO_POINTS, type BodyRefusal } from '../../../src/http/track-body.js';
import type { EncodedPoints } from '../../../src/track-point/encode.js';
import { messagesOf } from '../../../support/messages.js';

const limits = { maxBodyBytes: 4096, maxPoints: 5 };
const point = { container_id: 'c1', lat: 1, lon: 2, timestamp: '2024-05-01T12:00:00Z' };

const decode = (body: string | Buffer, gzip = false) => {
  const raw = typeof body === 'string' ? Buffer.from(body) : body;
  return decodeTrackBody(gzip ? gzipSync(raw) : raw, gzip, limits);
};
const refusal = (body: string | Buffer, gzip = false): BodyRefusal => {
  const out = decode(body, gzip);
  if (!('refused' in out)) throw new Error(`expected a refusal, got ${out.count} points`);
  return out;
};
const points = (body: string | Buffer, gzip = false): EncodedPoints => {
  const out = decode(body, gzip);
  if ('refused' in out) throw new Error(`expected points, got ${out.refused}: ${out.message}`);
  return out;
};

describe('decodeTrackBody', () => {
  it('turns a valid array into one message per point, speed filled in', () => {
    const batch = points(JSON.stringify([point, { ...point, container_id: 'c2', speed: 4 }]));
    expect(messagesOf(batch).values.map((v) => JSON.parse(v.toString()))).toEqual([
      { ...point, speed: 0 },
      { ...point, container_id: 'c2', speed: 4 },
    ]);
  });

  it('gives no points for an empty array (answered 202 {"accepted":0}, nothing produced)', () => {
    expect(points('[]').count).toBe(0);
    expect(points(' [ ] ').count).toBe(0);
    expect(NO_POINTS.count).toBe(0);
  });

  it.each([
    ['not JSON', '{"a":', 'invalid_json'],
    ['an empty body', '', 'invalid_json'],
    ['trailing garbage', '[] x', 'invalid_json'],
    ['a byte-order mark', '\ufeff[]', 'invalid_json'],
    ['an object', '{"container_id":"c"}', 'validation_failed'],
    ['a number', '42', 'validation_failed'],
    ['null', 'null', 'validation_failed'],
  ])('refuses %s: %s', (_name, body, code) => {
    expect(refusal(body).refused).toBe(code);
  });

  it('refuses invalid UTF-8 instead of replacing it', () => {
    const r = refusal(Buffer.concat([Buffer.from('[{"container_id":"'), Buffer.from([0xc3, 0x28]), Buffer.from('"}]')]));
    expect([r.refused, r.message]).toEqual(['invalid_json', 'body is not valid UTF-8']);
  });

  it('is all or nothing: one invalid point refuses the whole request, with details and every point counted', () => {
    const r = refusal(JSON.stringify([point, point, point, { ...point, lat: 91 }]));
    expect(r).toEqual({
      refused: 'validation_failed',
      message: '1 invalid track point',
      points: 4,
      details: [{ index: 3, field: 'lat', message: 'must be between -90 and 90' }],
    });
  });

  it('refuses more than MAX_POINTS points as too large', () => {
    const r = refusal(JSON.stringify(Array(6).fill(point)));
    expect([r.refused, r.points, r.message]).toEqual(['payload_too_large', 6, '6 track points in one request; at most 5 (MAX_POINTS)']);
  });

  it('reads gzip bodies', () => {
    expect(points(JSON.stringify([point]), true).count).toBe(1);
  });

  it('refuses a gzip body that inflates past MAX_BODY_BYTES as too large (a gzip bomb), and one that is not gzip as invalid', () => {
    expect(refusal(Buffer.alloc(1_000_000, 0x20), true).refused).toBe('payload_too_large');
    const notGzip = decodeTrackBody(Buffer.from('not gzip at all'), true, limits);
    expect('refused' in notGzip && notGzip.refused).toBe('invalid_json');
  });
});
