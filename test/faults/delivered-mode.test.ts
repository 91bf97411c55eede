// ACK_MODE=delivered answers within DELIVERY_TIMEOUT_MS (plus the stated margin) whatever the broker
// does, and says what happened from librdkafka's message status: delivery_failed when nothing of the
// request was written (a stopped broker: the points were never sent), delivery_uncertain when some may
// have been (a frozen broker: sent, no answer). Each read back from Kafka afterwards.
//
// Before topic-level properties went to the topic configuration (src/kafka/settings.ts), librdkafka ran
// with its own 300 s message timeout whatever DELIVERY_TIMEOUT_MS said: a request to a frozen broker
// got no answer within 30 s.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEADLINE_MARGIN_MS } from '../../src/kafka/delivery-reports.js';
import { consumeAll } from '../../support/kafka.js';
import { point, postTrack, startService, type Service } from '../helpers/service.js';
import { fileTopic } from '../helpers/topic.js';

const KAFKA_SH = fileURLToPath(new URL('../../scripts/kafka.sh', import.meta.url));
const kafka = (...args: string[]) =>
  execFileSync(KAFKA_SH, args, { stdio: ['ignore', 'pipe', 'inherit'] })
    .toString()
    .trim();
const DELIVERY_TIMEOUT_MS = 2_000;
/** The answer's bound: the timeout, the service's margin, and the time of one HTTP exchange on a busy machine. */
const ANSWER_WITHIN_MS = DELIVERY_TIMEOUT_MS + DEADLINE_MARGIN_MS + 500;

const topic = fileTopic('delivered');
let svc: Service;
let frozen = false;
let stopped = false;

beforeAll(async () => {
  // The grace period is long: the requests must be taken, and answered by their deliveries, not
  // refused up front because no broker answers.
  svc = await startService({ MQ_TOPIC: topic, ACK_MODE: 'delivered', DELIVERY_TIMEOUT_MS: String(DELIVERY_TIMEOUT_MS), BROKER_DOWN_GRACE_MS: '60000' });
  expect((await postTrack(svc.url, [point('warm-1'), point('warm-2')])).status).toBe(202);
});

afterAll(async () => {
  // Whatever happened, the broker every other test uses answers again.
  if (frozen) kafka('thaw-node', 'single');
  if (stopped) kafka('start');
  await svc?.stop();
});

/** POST /track, timed. */
async function timedPost(points: ReturnType<typeof point>[]) {
  const sent = Date.now();
  const answer = await postTrack(svc.url, points);
  return { ...answer, ms: Date.now() - sent };
}

describe('ACK_MODE=delivered when Kafka does not acknowledge', () => {
  it('answers within DELIVERY_TIMEOUT_MS + margin with delivery_uncertain when the broker is frozen (sent, no answer)', async () => {
    kafka('freeze-node', 'single');
    frozen = true;
    const r = await timedPost([point('frozen-1'), point('frozen-2')]);
    kafka('thaw-node', 'single');
    frozen = false;
    console.log(`frozen broker: ${r.status} ${JSON.stringify(r.json)} after ${r.ms} ms`);
    expect(r.ms).toBeGreaterThanOrEqual(DELIVERY_TIMEOUT_MS - 100);
    expect(r.ms).toBeLessThanOrEqual(ANSWER_WITHIN_MS);
    expect([r.status, r.json.error, r.headers.get('retry-after')]).toEqual([500, 'delivery_uncertain', '1']);
    expect(String(r.json.message)).toMatch(
      /2 of 2 track points were not acknowledged .*; 0 were written and 2 may have been .*: resending the whole request may duplicate them/,
    );

    // The broker answers again: the next request is acknowledged.
    expect((await postTrack(svc.url, [point('after-thaw')])).status).toBe(202);
    const read = await consumeAll(topic, { expected: 3, idleMs: 3_000 });
    const count = (key: string) => read.filter((m) => m.key === key).length;
    console.log(`read back after the thaw: frozen-1 ×${count('frozen-1')}, frozen-2 ×${count('frozen-2')}`);
    expect([count('warm-1'), count('warm-2'), count('after-thaw')]).toEqual([1, 1, 1]);
    // "May have been written": once at most each (the idempotent producer never writes one twice).
    expect(count('frozen-1')).toBeLessThanOrEqual(1);
    expect(count('frozen-2')).toBeLessThanOrEqual(1);
  }, 60_000);

  it('answers within DELIVERY_TIMEOUT_MS + margin with delivery_failed when the broker is stopped (nothing sent), and nothing of it arrives later', async () => {
    kafka('stop');
    stopped = true;
    const r = await timedPost([point('stopped-1'), point('stopped-2')]);
    console.log(`stopped broker: ${r.status} ${JSON.stringify(r.json)} after ${r.ms} ms`);
    kafka('start');
    stopped = false;
    expect(r.ms).toBeGreaterThanOrEqual(DELIVERY_TIMEOUT_MS - 100);
    expect(r.ms).toBeLessThanOrEqual(ANSWER_WITHIN_MS);
    expect([r.status, r.json.error, r.headers.get('retry-after')]).toEqual([500, 'delivery_failed', '1']);
    expect(String(r.json.message)).toMatch(/^none of the 2 track points was written to Kafka \(.+\); resend the whole request$/);

    // Safe to resend: the points are not in Kafka, and do not arrive once the broker is back.
    let resent: Awaited<ReturnType<typeof postTrack>> | null = null;
    for (let i = 0; i < 60 && resent?.status !== 202; i++) {
      resent = await postTrack(svc.url, [point('stopped-1'), point('stopped-2')]);
      if (resent.status !== 202) await new Promise((res) => setTimeout(res, 500));
    }
    expect(resent?.status).toBe(202);
    const read = await consumeAll(topic, { expected: 5, idleMs: 3_000 });
    const count = (key: string) => read.filter((m) => m.key === key).length;
    expect([count('stopped-1'), count('stopped-2')]).toEqual([1, 1]);
  }, 120_000);
});
