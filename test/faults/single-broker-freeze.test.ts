// A broker that stops answering but keeps its connections (SIGSTOP: a frozen VM, a long GC pause) is
// noticed as fast as one that is gone: the local single broker frozen under load, then thawed, with
// an account of every point.
import { execFileSync } from 'node:child_process';
import { request } from 'node:http';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { ACCOUNTING_HEADER, AccountedLoad, accountingRow, expectEveryAcceptedPointOnce } from '../helpers/accounting.js';
import { consumeAll, createTopic, deleteTopic, uniqueTopic } from '../../support/kafka.js';
import { metricValue, point, postFresh, producerStateLines, startService, until, type Answer } from '../helpers/service.js';

const KAFKA_SH = fileURLToPath(new URL('../../scripts/kafka.sh', import.meta.url));
const kafka = (...args: string[]) => execFileSync(KAFKA_SH, args, { stdio: ['ignore', 'pipe', 'inherit'] }).toString().trim();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const GRACE_MS = 5_000;

let frozen = false;
afterAll(() => {
  // Whatever happened, the broker every other test uses answers again.
  if (frozen) kafka('thaw-node', 'single');
});

/** GET /readyz on a fresh connection, so that every worker gets asked in turn. */
function readyz(url: string): Promise<{ status: number; reason: string }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/readyz`, { agent: false }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, reason: body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * Waits for three fresh-connection /readyz answers with this status in a row (every worker agrees);
 * returns when the first of them came, and the reason it gave.
 */
async function readinessStreak(url: string, status: number): Promise<{ from: number; reason: string }> {
  let streak = 0;
  let from = 0;
  let reason = '';
  await until(`readiness ${status}`, async () => {
    const r = await readyz(url);
    if (r.status !== status) {
      streak = 0;
      return false;
    }
    if (streak++ === 0) from = Date.now();
    reason = r.reason;
    return streak >= 3;
  }, 30_000);
  return { from, reason };
}

describe('the single broker frozen (SIGSTOP) under load', () => {
  it('readiness 503 and 500 with Retry-After within the grace period plus a second, 200 and 202 again after the thaw; nothing lost or duplicated', { timeout: 180_000 }, async () => {
    const topic = await createTopic(uniqueTopic('freeze'));
    const svc = await startService({ MQ_TOPIC: topic, WORKERS: '2', BROKER_DOWN_GRACE_MS: String(GRACE_MS) });
    const load = new AccountedLoad(svc.url, { connections: 8, pointsPerRequest: 10 });
    let noticedMs = -1;
    let recoveredMs = -1;
    let refusal: { status: number; retryAfter: string | null; body: Record<string, unknown> } | null = null;
    let reason = '';
    let stalledMetric: number | undefined;
    let afterThaw: Answer[] = [];
    try {
      load.start();
      await sleep(4_000);
      const frozenAt = Date.now();
      kafka('freeze-node', 'single');
      frozen = true;
      // Every worker unready: three fresh-connection answers of 503 in a row; noticed at the first.
      const unready = await readinessStreak(svc.url, 503);
      noticedMs = unready.from - frozenAt;
      reason = unready.reason;
      const res = await fetch(`${svc.url}/track`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify([point('during-freeze')]) });
      refusal = { status: res.status, retryAfter: res.headers.get('retry-after'), body: (await res.json()) as Record<string, unknown> };
      stalledMetric = metricValue(await (await fetch(`${svc.url}/metrics`)).text(), 'ingest_kafka_stalled');
      await sleep(Math.max(0, 12_000 - (Date.now() - frozenAt)));

      const thawedAt = Date.now();
      kafka('thaw-node', 'single');
      frozen = false;
      recoveredMs = (await readinessStreak(svc.url, 200)).from - thawedAt;
      afterThaw = await Promise.all(Array.from({ length: 20 }, (_, i) => postFresh(svc.url, [point(`thawed-${load.runId}-${i}`)])));
      await sleep(3_000);
    } finally {
      if (frozen) kafka('thaw-node', 'single');
      frozen = false;
      await load.stop();
    }
    const messages = await consumeAll(topic, { expected: load.accepted, timeoutMs: 90_000, idleMs: 3_000, giveUpIdleMs: 10_000 });
    const a = load.account(messages);
    console.log(`${ACCOUNTING_HEADER}\n${accountingRow('single broker frozen (SIGSTOP) for 12 s under load, then thawed', a)}\n(readiness 503 ${noticedMs} ms after the freeze: ${reason}; 200 ${recoveredMs} ms after the thaw)`);
    console.log(producerStateLines(svc.output));
    expect(noticedMs).toBeLessThanOrEqual(GRACE_MS + 1_000);
    expect(reason).toMatch(/broker 127\.0\.0\.1:9092\/1 has answered nothing for \d+\.\d s \(\d+ requests waiting\)/);
    expect(refusal).toMatchObject({ status: 500, retryAfter: '1', body: { error: 'broker_unavailable' } });
    expect(String(refusal?.body.message)).toMatch(/answered nothing/);
    expect(stalledMetric).toBe(2); // both workers
    expect(recoveredMs).toBeLessThanOrEqual(2_000);
    expect(afterThaw.filter((r) => r.status !== 202)).toEqual([]);
    expect(a.statuses['500']).toBeGreaterThan(0);
    expectEveryAcceptedPointOnce(a, 5_000);
    // One line each way per worker, not one per request.
    expect(svc.output.filter((l) => l.includes('has answered nothing')).length).toBeLessThanOrEqual(2);
    expect(await svc.stop()).toBe(0);
    await deleteTopic(topic);
  });
});
