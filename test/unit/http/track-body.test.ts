// POST /track's logic behind the socket, with the producer replaced at its seam (PointSink).
// The integration tests run the same paths against a real broker.
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { acceptedBody, handleTrackBody, refusalAnswers, type PointSink } from '../../../src/http/track-body.js';
import { CATALOGUE, PRODUCER_REFUSALS, type ProducerRefusal } from '../../../src/api/errors.js';
import type { Refusal } from '../../../src/kafka/producer.js';
import { type EncodedPoints } from '../../../src/track-point/encode.js';
import { messagesOf } from '../../../support/messages.js';

const context = { brokerDownGraceMs: 5000, topic: 't', brokers: 'b1:9092', queueFullWaitMs: 200 };
const limits = { maxBodyBytes: 4096, maxPoints: 5, refusals: refusalAnswers(context) };
const point = { container_id: 'c1', lat: 1, lon: 2, timestamp: '2024-05-01T12:00:00Z' };

class RecordingSink implements PointSink {
  /** The messages of each batch taken (copies: the batch views scratch space the next request reuses). */
  batches: ReturnType<typeof messagesOf>[] = [];
  constructor(
    private readonly refusal: Refusal | null = null,
    private readonly early: ProducerRefusal | null = null,
  ) {}
  admission(): ProducerRefusal | null {
    return this.early;
  }
  tryEnqueue(batch: EncodedPoints): Refusal | null {
    if (this.refusal === null) this.batches.push(messagesOf(batch));
    return this.refusal;
  }
}
const run = (body: string | Buffer, opts: { gzip?: boolean; sink?: RecordingSink } = {}) => {
  const sink = opts.sink ?? new RecordingSink();
  const raw = typeof body === 'string' ? Buffer.from(body) : body;
  const out = handleTrackBody(opts.gzip ? gzipSync(raw) : raw, opts.gzip ?? false, limits, sink);
  return { ...out, json: JSON.parse(out.body.toString()) as Record<string, unknown>, sink };
};

describe('handleTrackBody', () => {
  it('accepts a valid array: 202 {"accepted":N} and every point handed over', () => {
    const r = run(JSON.stringify([point, { ...point, container_id: 'c2', speed: 4 }]));
    expect(r.status).toBe(202);
    expect(r.json).toEqual({ accepted: 2 });
    expect(r.sink.batches).toHaveLength(1);
    expect(r.sink.batches[0]!.values.map((v) => JSON.parse(v.toString()))).toEqual([
      { ...point, speed: 0 },
      { ...point, container_id: 'c2', speed: 4 },
    ]);
  });

  it('answers an empty array with 202 {"accepted":0} and produces nothing', () => {
    const r = run('[]');
    expect([r.status, r.json, r.sink.batches.length]).toEqual([202, { accepted: 0 }, 0]);
  });

  it.each([
    ['not JSON', '{"a":', 'invalid_json'],
    ['an empty body', '', 'invalid_json'],
    ['trailing garbage', '[] x', 'invalid_json'],
    ['a byte-order mark', '\ufeff[]', 'invalid_json'],
    ['an object', '{"container_id":"c"}', 'validation_failed'],
    ['a number', '42', 'validation_failed'],
    ['null', 'null', 'validation_failed'],
  ])('answers %s with 400 %s', (_name, body, code) => {
    const r = run(body);
    expect(r.status).toBe(400);
    expect(r.json.error).toBe(code);
    expect(r.sink.batches).toHaveLength(0);
  });

  it('refuses invalid UTF-8 instead of replacing it', () => {
    const r = run(Buffer.concat([Buffer.from('[{"container_id":"'), Buffer.from([0xc3, 0x28]), Buffer.from('"}]')]));
    expect([r.status, r.json.error, r.json.message]).toEqual([400, 'invalid_json', 'body is not valid UTF-8']);
  });

  it('is all or nothing: one invalid point rejects the whole request with details', () => {
    const r = run(JSON.stringify([point, point, point, { ...point, lat: 91 }]));
    expect(r.status).toBe(400);
    expect(r.json).toEqual({
      error: 'validation_failed',
      message: '1 invalid track point',
      details: [{ index: 3, field: 'lat', message: 'must be between -90 and 90' }],
    });
    expect(r.sink.batches).toHaveLength(0);
  });

  it('answers more than MAX_POINTS points with 413', () => {
    const r = run(JSON.stringify(Array(6).fill(point)));
    expect([r.status, r.json.error]).toEqual([413, 'payload_too_large']);
    expect(r.sink.batches).toHaveLength(0);
  });

  it('reads gzip bodies', () => {
    const r = run(JSON.stringify([point]), { gzip: true });
    expect([r.status, r.json]).toEqual([202, { accepted: 1 }]);
  });

  it('answers a gzip body that inflates past MAX_BODY_BYTES with 413 (gzip bomb)', () => {
    const r = run(Buffer.alloc(1_000_000, 0x20), { gzip: true });
    expect([r.status, r.json.error]).toEqual([413, 'payload_too_large']);
  });

  it('answers a corrupt gzip body with 400', () => {
    const r = handleTrackBody(Buffer.from('not gzip at all'), true, limits, new RecordingSink());
    expect([r.status, JSON.parse(r.body.toString()).error]).toEqual([400, 'invalid_json']);
  });

  it.each(PRODUCER_REFUSALS)('answers a producer refusal (%s) with its own code, 500, the catalogue\'s Retry-After and a message that nothing was taken', (refusal) => {
    const r = run(JSON.stringify([point]), { sink: new RecordingSink(refusal) });
    expect([r.status, r.json.error, r.retryAfter, r.reason, r.refusal]).toEqual([500, refusal, CATALOGUE[refusal].retryAfter, refusal, refusal]);
    expect(r.json.message).toMatch(/nothing from this request was accepted$/);
  });

  it('counts the points of each refused request as refused, though the answer is made once', () => {
    const refused = new RecordingSink('queue_full');
    const three = run(JSON.stringify([point, point, point]), { sink: refused });
    const two = run(JSON.stringify([point, point]), { sink: refused });
    expect([three.points, two.points]).toEqual([3, 2]);
    expect([three.reason, two.reason]).toEqual(['queue_full', 'queue_full']);
    expect(two.body).toBe(three.body);
    expect(two.json.message).toMatch(/producer queue is full/);
  });

  it('names the settings of the server it answers for in its refusals', () => {
    const message = (ctx: typeof context, refusal: ProducerRefusal) => JSON.parse(refusalAnswers(ctx)[refusal].body.toString()).message;
    const other = { brokerDownGraceMs: 1234, topic: 'other.topic', brokers: 'k1:9092,k2:9092', queueFullWaitMs: 50 };
    expect(message(other, 'broker_unavailable')).toMatch(/no Kafka broker of k1:9092,k2:9092 can be reached .* more than 1234 ms/);
    expect(message(other, 'topic_unknown')).toMatch(/topic other\.topic does not exist/);
    expect(message(other, 'queue_full')).toMatch(/within 50 ms \(QUEUE_FULL_WAIT_MS\)/);
    expect(message(context, 'broker_unavailable')).toMatch(/more than 5000 ms/);
  });
});

describe('acceptedBody', () => {
  it('answers {"accepted":n} for any count, kept ones and built ones alike, and twice the same', () => {
    for (const n of [0, 1, 7, 100, 1000, 1001, 250000]) {
      expect(JSON.parse(acceptedBody(n).toString())).toEqual({ accepted: n });
      expect(acceptedBody(n).toString()).toBe(`{"accepted":${n}}`);
    }
  });
});
