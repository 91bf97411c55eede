// Every answer POST /track gives: statuses, codes and Retry-After from the catalogue, the refusals of
// the write-ahead path made once and kept, the points each answer counts.
import { describe, expect, it } from 'vitest';
import { CATALOGUE, PRODUCER_REFUSALS, type ProducerRefusal } from '../../../src/api/errors.js';
import { accepted, refuse, TrackAnswers } from '../../../src/http/track-answers.js';

const context = { brokerDownGraceMs: 5000, topic: 't', brokers: 'b1:9092', queueFullWaitMs: 200, maxBodyBytes: 4096 };
const answers = new TrackAnswers(context);
const json = (body: string | Buffer) => JSON.parse(body.toString()) as Record<string, unknown>;

describe('TrackAnswers', () => {
  it.each(PRODUCER_REFUSALS)(
    "answers a refusal of the write-ahead path (%s) with its own code, 500, the catalogue's Retry-After and a message that nothing was taken",
    (refusal) => {
      const a = answers.refused(refusal, 1, 0);
      expect([a.status, json(a.body).error, a.retryAfter, a.reason, a.refusal]).toEqual([500, refusal, CATALOGUE[refusal].retryAfter, refusal, refusal]);
      expect(json(a.body).message).toMatch(/nothing from this request was accepted$/);
    },
  );

  it('counts the points of each refused request as refused, though the answer is made once', () => {
    const three = answers.refused('queue_full', 3, 0);
    const two = answers.refused('queue_full', 2, 0);
    expect([three.points, two.points, answers.refused('queue_full', 0, 0).points]).toEqual([3, 2, 0]);
    expect(two.body).toBe(three.body);
    expect(json(two.body).message).toMatch(/producer queue is full/);
  });

  it('answers a point too large for a Kafka message with 413, naming its size', () => {
    const a = answers.refused('message_too_large', 2, 2_000_000);
    expect([a.status, json(a.body).error, a.points]).toEqual([413, 'payload_too_large', 2]);
    expect(json(a.body).message).toMatch(/encodes to 2000000 bytes/);
  });

  it("answers a request whose 202 waited and failed with the failure's code and message", () => {
    const a = answers.late({ code: 'journal_failed', message: 'the disk failed' }, 5);
    expect([a.status, json(a.body), a.retryAfter, a.points]).toEqual([500, { error: 'journal_failed', message: 'the disk failed' }, 1, 5]);
    expect(CATALOGUE.journal_failed.resend).toBe('check');
  });

  it('names the settings of the server it answers for in its refusals', () => {
    const message = (ctx: typeof context, refusal: ProducerRefusal) => json(new TrackAnswers(ctx).refusals[refusal].body).message;
    const other = { brokerDownGraceMs: 1234, topic: 'other.topic', brokers: 'k1:9092,k2:9092', queueFullWaitMs: 50, maxBodyBytes: 1 };
    expect(message(other, 'broker_unavailable')).toMatch(/no Kafka broker of k1:9092,k2:9092 can be reached .* more than 1234 ms/);
    expect(message(other, 'topic_unknown')).toMatch(/topic other\.topic does not exist/);
    expect(message(other, 'queue_full')).toMatch(/within 50 ms \(QUEUE_FULL_WAIT_MS\)/);
    expect(message(context, 'broker_unavailable')).toMatch(/more than 5000 ms/);
    expect(json(new TrackAnswers(other).tooLarge.body).message).toBe('body is larger than 1 bytes (MAX_BODY_BYTES)');
  });

  it('refuses with details, at most what was given', () => {
    const a = refuse('validation_failed', '1 invalid track point', 3, [{ index: 2, field: 'lat', message: 'must be between -90 and 90' }]);
    expect([a.status, json(a.body).details, a.points]).toEqual([400, [{ index: 2, field: 'lat', message: 'must be between -90 and 90' }], 3]);
  });
});

describe('accepted', () => {
  it('answers {"accepted":n} for any count, kept ones and built ones alike, and twice the same', () => {
    for (const n of [0, 1, 7, 100, 1000, 1001, 250000]) {
      expect([accepted(n).status, json(accepted(n).body), accepted(n).points]).toEqual([202, { accepted: n }, n]);
      expect(accepted(n).body.toString()).toBe(`{"accepted":${n}}`);
    }
    expect(accepted(7)).toBe(accepted(7));
  });
});

describe('the shape of every answer', () => {
  // The code that writes and counts answers is compiled on the 202s of valid requests; an answer of
  // another shape (a refusal) would throw that code away at the first refusal of a flood.
  it('is one: a 202, a refusal with details, a made-once 500, one with points, a late failure and a 413 all have the same fields in the same order, frozen, their body bytes', () => {
    const all = [
      accepted(1),
      accepted(5000),
      refuse('validation_failed', '1 invalid track point', 1, [{ index: 0, field: 'lat', message: 'must be between -90 and 90' }]),
      refuse('invalid_json', 'body is not valid JSON'),
      answers.unsupportedType,
      answers.tooLarge,
      answers.refusals.queue_full,
      answers.refused('broker_unavailable', 3, 0),
      answers.refused('message_too_large', 2, 2_000_000),
      answers.late({ code: 'journal_failed', message: 'the disk failed' }, 5),
    ];
    for (const a of all) {
      expect(Object.keys(a)).toEqual(Object.keys(accepted(1)));
      expect(Object.isFrozen(a)).toBe(true);
      expect(Buffer.isBuffer(a.body)).toBe(true);
    }
  });
});
