// POST /track from its headers to its answer, with the write-ahead path replaced at its seam
// (PointSink) and the socket by an exchange that records what it is told. The integration tests run
// the same paths against uWebSockets.js and a real broker.
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import type { ProducerRefusal } from '../../../src/api/errors.js';
import { loadConfig } from '../../../src/config.js';
import type { TrackAnswer } from '../../../src/http/track-answers.js';
import { isJsonContentType, TrackHandler, type TrackExchange } from '../../../src/http/track-handler.js';
import { createWorkerMetrics } from '../../../src/metrics/metrics.js';
import type { RefusedRequest } from '../../../src/refused/refused-requests.js';
import type { EncodedPoints } from '../../../src/track-point/encode.js';
import type { LateFailure, Pending, PointSink, Refusal } from '../../../src/write-ahead/acceptance.js';

const point = { container_id: 'c1', lat: 1, lon: 2, timestamp: '2024-05-01T12:00:00Z' };
const body = (n: number) => Buffer.from(JSON.stringify(Array.from({ length: n }, () => point)));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A write-ahead path whose admission and acceptance answer what the test says; with `later`, it keeps the answers that wait. */
class FakeSink implements PointSink {
  admits: ProducerRefusal | null = null;
  refuses: Refusal | null = null;
  later = false;
  taken = 0;
  waiting: ((failure: LateFailure | null) => void)[] = [];
  admission(): ProducerRefusal | null {
    return this.admits;
  }
  accept(batch: EncodedPoints): Refusal | Pending | null {
    if (this.refuses !== null) return this.refuses;
    this.taken += batch.count;
    if (!this.later) return null;
    return { whenAnswerable: (answer) => void this.waiting.push(answer) };
  }
  readiness() {
    return { ready: true, reason: 'ok' };
  }
}

function exchange(aborted = false) {
  const answers: { status: number; error?: string; stopReading: boolean }[] = [];
  const x: TrackExchange & { answers: typeof answers; abort(): void } = {
    started: performance.now(),
    answers,
    aborted: () => aborted,
    abort: () => {
      aborted = true;
    },
    client: () => ({ address: '192.0.2.7', apiKeyName: null }),
    answer(outcome: TrackAnswer, stopReading: boolean) {
      const json = JSON.parse(outcome.body.toString()) as { error?: string };
      answers.push({ status: outcome.status, ...(json.error === undefined ? {} : { error: json.error }), stopReading });
    },
  };
  return x;
}

function handler(env: Record<string, string> = {}) {
  const producer = new FakeSink();
  const metrics = createWorkerMetrics('t');
  const h = new TrackHandler(loadConfig({ MAX_BODY_BYTES: '4096', ...env }), producer, metrics);
  return { h, producer, tally: metrics.track.tally };
}

/** admit(), then take() of the body if admitted: the path of one request. */
function post(h: TrackHandler, x: ReturnType<typeof exchange>, data: Buffer, headers: { type?: string; encoding?: string; length?: string } = {}) {
  const a = h.admit(x, headers.type ?? 'application/json', headers.encoding ?? '', headers.length ?? String(data.byteLength));
  if (a !== null) h.take(x, data, true, a.gzipped, a.waits);
}

describe('TrackHandler: admission, from the headers', () => {
  it('refuses a Content-Type other than JSON, an encoding other than gzip, a Content-Length over the limit: the rest unread', () => {
    const { h, producer } = handler();
    for (const [headers, status] of [
      [{ type: 'text/plain' }, 415],
      [{ encoding: 'br' }, 415],
      [{ length: '5000' }, 413],
    ] as const) {
      const x = exchange();
      post(h, x, body(1), headers);
      expect(x.answers, JSON.stringify(headers)).toEqual([
        { status, error: status === 415 ? 'unsupported_media_type' : 'payload_too_large', stopReading: true },
      ]);
    }
    expect(producer.taken).toBe(0);
  });

  it("refuses with the producer's own code before the body is read when it takes nothing now, the connection kept, and counts it", () => {
    const { h, producer, tally } = handler();
    producer.admits = 'broker_stalled';
    const x = exchange();
    post(h, x, Buffer.from('not even json'));
    expect(x.answers).toEqual([{ status: 500, error: 'broker_stalled', stopReading: false }]);
    expect([tally.byStatus[500], tally.refused.broker_stalled]).toEqual([1, 1]);
  });

  it('takes JSON with parameters, in any case, and no Content-Type at all', () => {
    for (const type of ['application/json', 'Application/JSON; charset=utf-8', '']) expect(isJsonContentType(type), type).toBe(true);
    for (const type of ['application/jsonx', 'text/json']) expect(isJsonContentType(type), type).toBe(false);
  });
});

describe('TrackHandler: taking a body', () => {
  it('answers 202 at once and counts the points; answers 400 for an invalid body and counts its refusal', () => {
    const { h, producer, tally } = handler();
    const ok = exchange();
    post(h, ok, body(3));
    const bad = exchange();
    post(h, bad, Buffer.from('[{"lat": 1}]'));
    expect(ok.answers).toEqual([{ status: 202, stopReading: false }]);
    expect(bad.answers).toEqual([{ status: 400, error: 'validation_failed', stopReading: false }]);
    expect([producer.taken, tally.points, tally.byStatus[202], tally.byStatus[400], tally.refused.validation_failed]).toEqual([3, 3, 1, 1, 1]);
  });

  it('refuses a body that grew past MAX_BODY_BYTES while being read, the rest unread', () => {
    const { h } = handler();
    const x = exchange();
    h.tooLarge(x, false, () => new Uint8Array(0));
    expect(x.answers).toEqual([{ status: 413, error: 'payload_too_large', stopReading: true }]);
  });

  it('answers a request whose answer waits (the disk, or Kafka) once the write-ahead path says so: 202, or its failure; an aborted client is counted, not answered', () => {
    const { h, producer, tally } = handler();
    producer.later = true;
    const [a, b, c] = [exchange(), exchange(), exchange()];
    for (const x of [a, b, c]) post(h, x, body(2));
    expect([a.answers, h.awaitingAnswer]).toEqual([[], 3]);
    const [ta, tb, tc] = producer.waiting as [(f: LateFailure | null) => void, (f: LateFailure | null) => void, (f: LateFailure | null) => void];
    ta(null);
    tb({ code: 'delivery_failed', message: 'none of the 2 track points was written to Kafka' });
    c.abort();
    tc(null);
    expect([a.answers, b.answers, c.answers]).toEqual([
      [{ status: 202, stopReading: false }],
      [{ status: 500, error: 'delivery_failed', stopReading: false }],
      [],
    ]);
    expect([h.awaitingAnswer, tally.byStatus[202], tally.points]).toEqual([0, 2, 4]);
  });

  it('answers 500 journal_failed when the journal failed, before the body is read and after it', () => {
    const { h, producer, tally } = handler();
    producer.admits = 'journal_failed';
    const before = exchange();
    post(h, before, body(1));
    producer.admits = null;
    producer.refuses = 'journal_failed';
    const after = exchange();
    post(h, after, body(3));
    expect([before.answers, after.answers]).toEqual([
      [{ status: 500, error: 'journal_failed', stopReading: false }],
      [{ status: 500, error: 'journal_failed', stopReading: false }],
    ]);
    expect([producer.taken, tally.refused.journal_failed, tally.rejected.journal_failed]).toEqual([0, 2, 3]);
  });

  it('lets a request that finds the queue full wait for room, and takes it as room appears, oldest first', async () => {
    const { h, producer } = handler({ QUEUE_FULL_WAIT_MS: '2000' });
    producer.admits = 'queue_full';
    const [first, second] = [exchange(), exchange()];
    post(h, first, body(1));
    post(h, second, body(2));
    expect([first.answers, second.answers, h.waitingForRoom]).toEqual([[], [], 2]);
    producer.admits = null;
    await sleep(20);
    expect([first.answers, second.answers, producer.taken, h.waitingForRoom]).toEqual([
      [{ status: 202, stopReading: false }],
      [{ status: 202, stopReading: false }],
      3,
      0,
    ]);
  });

  it('answers queue_full after QUEUE_FULL_WAIT_MS without room, and a request read whole that did not fit waits too', async () => {
    const { h, producer } = handler({ QUEUE_FULL_WAIT_MS: '50' });
    producer.refuses = 'queue_full'; // admitted from its headers, then no room for its points
    const x = exchange();
    post(h, x, body(1));
    expect([x.answers, h.waitingForRoom]).toEqual([[], 1]);
    producer.admits = 'queue_full';
    await sleep(120);
    expect(x.answers).toEqual([{ status: 500, error: 'queue_full', stopReading: false }]);
  });

  it('refuses at once, without waiting, when QUEUE_FULL_WAIT_MS is 0', () => {
    const { h, producer } = handler({ QUEUE_FULL_WAIT_MS: '0' });
    producer.admits = 'queue_full';
    const x = exchange();
    post(h, x, body(1));
    expect(x.answers).toEqual([{ status: 500, error: 'queue_full', stopReading: false }]);
  });
});

describe('TrackHandler: requests refused for their content, handed to the refused-requests topic', () => {
  function keeping() {
    const kept: RefusedRequest[] = [];
    const producer = new FakeSink();
    const h = new TrackHandler(loadConfig({ MAX_BODY_BYTES: '4096', MQ_REFUSED_TOPIC: 'refused' }), producer, createWorkerMetrics('t'), {
      admit: () => true,
      keep: (r) => void kept.push(r),
    });
    return { h, producer, kept };
  }

  it('hands over every 400, 413 and 415 with the body as received, the answer and the client; never a 202 or a 500', () => {
    const { h, producer, kept } = keeping();
    h.admit(exchange(), 'text/csv', '', '12');
    h.admit(exchange(), '', 'br', '');
    h.admit(exchange(), '', '', '99999');
    h.tooLarge(exchange(), false, () => Buffer.from('[{"container_id":"c'));
    post(h, exchange(), Buffer.from('[{"container_id":"c1",'));
    post(h, exchange(), Buffer.from('[{"container_id":"c1","lat":95,"lon":0,"timestamp":"2024-05-01T12:00:00Z"}]'));
    post(h, exchange(), gzipSync(Buffer.from('[1,2]')), { encoding: 'gzip' });
    post(h, exchange(), body(2));
    producer.refuses = 'queue_full';
    post(h, exchange(), body(2));
    expect(kept.map((r) => [r.code, r.status, r.received?.toString() ?? null, r.sentBytes, r.client.address])).toEqual([
      ['unsupported_media_type', 415, null, 12, '192.0.2.7'],
      ['unsupported_media_type', 415, null, null, '192.0.2.7'],
      ['payload_too_large', 413, null, 99999, '192.0.2.7'],
      ['payload_too_large', 413, '[{"container_id":"c', null, '192.0.2.7'],
      ['invalid_json', 400, '[{"container_id":"c1",', 22, '192.0.2.7'],
      ['validation_failed', 400, '[{"container_id":"c1","lat":95,"lon":0,"timestamp":"2024-05-01T12:00:00Z"}]', 75, '192.0.2.7'],
      ['validation_failed', 400, gzipSync(Buffer.from('[1,2]')).toString(), expect.any(Number), '192.0.2.7'],
    ]);
    expect([kept[0]!.contentType, kept[1]!.contentEncoding, kept[3]!.partial, kept[5]!.details?.[0]?.field, kept[6]!.decoded?.toString()]).toEqual([
      'text/csv',
      'br',
      true,
      'lat',
      '[1,2]',
    ]);
  });

  it('over the rate, gathers nothing of the request (not even what was read) and answers the same', () => {
    let gathered = 0;
    const h = new TrackHandler(loadConfig({ MAX_BODY_BYTES: '4096' }), new FakeSink(), createWorkerMetrics('t'), {
      admit: () => false,
      keep: () => void gathered++,
    });
    const [a, b, c] = [exchange(), exchange(), exchange()];
    h.admit(a, 'text/csv', '', '');
    post(h, b, Buffer.from('[{"container_id":"c1",'));
    h.tooLarge(c, false, () => {
      gathered++;
      return new Uint8Array(0);
    });
    expect(gathered).toBe(0);
    expect([...a.answers, ...b.answers, ...c.answers].map((x) => x.status)).toEqual([415, 400, 413]);
  });
});
