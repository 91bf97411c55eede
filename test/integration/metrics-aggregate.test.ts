// One scrape of /metrics covers every worker (src/metrics/aggregate.ts): the primary collects the registries of
// the workers it names as serving and merges them; a worker that does not answer is left out after
// 2 s instead of stalling the scrape. Real cluster workers (test/fixtures/metrics-worker.mjs, which
// runs the built dist/), no broker.
import cluster, { type Worker } from 'node:cluster';
import { fileURLToPath } from 'node:url';
import client from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serveClusterMetrics } from '../../src/metrics/aggregate.js';
import { metricValue } from '../helpers/service.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/metrics-worker.mjs', import.meta.url));

interface Scraped {
  text?: string;
  error?: string;
  ms: number;
}

function fork(env: Record<string, string>): Promise<Worker> {
  const worker = cluster.fork(env);
  return new Promise((resolve, reject) => {
    worker.once('error', reject);
    worker.on('message', (m: { type?: string }) => {
      if (m.type === 'fixture:ready') resolve(worker);
    });
  });
}

function scrapeThrough(worker: Worker): Promise<Scraped> {
  return new Promise((resolve) => {
    const onMessage = (m: { type?: string } & Scraped) => {
      if (m.type !== 'fixture:scraped') return;
      worker.off('message', onMessage);
      resolve(m);
    };
    worker.on('message', onMessage);
    worker.send({ type: 'fixture:scrape' });
  });
}

describe('metrics across cluster workers', () => {
  let five: Worker;
  let seven: Worker;
  let silent: Worker;
  let serving: Worker[] = [];
  beforeAll(async () => {
    cluster.setupPrimary({ exec: FIXTURE, silent: true });
    [five, seven, silent] = await Promise.all([
      fork({ FIXTURE_POINTS: '5' }),
      fork({ FIXTURE_POINTS: '7' }),
      fork({ FIXTURE_POINTS: '11', FIXTURE_SILENT: '1' }),
    ]);
    const primary = new client.Registry();
    new client.Gauge({ name: 'fixture_primary_workers', help: 'workers', registers: [primary] }).set(3);
    serveClusterMetrics(primary, () => serving);
  });
  afterAll(() => {
    for (const w of [five, seven, silent]) w?.process.kill('SIGKILL');
  });

  it("sums the serving workers and adds the primary's own metrics, whichever worker asks", async () => {
    serving = [five, seven];
    for (const asker of [five, seven]) {
      const { text, error } = await scrapeThrough(asker);
      expect(error).toBeUndefined();
      expect(metricValue(text ?? '', 'fixture_points_total')).toBe(12);
      expect(metricValue(text ?? '', 'fixture_primary_workers')).toBe(3);
    }
  });

  it('leaves out a worker that is not serving (the idle standby), without asking it', async () => {
    serving = [five];
    const { text, ms } = await scrapeThrough(seven);
    expect(metricValue(text ?? '', 'fixture_points_total')).toBe(5);
    expect(ms).toBeLessThan(1_000);
  });

  it('answers without a worker that does not answer, after 2 s rather than never', async () => {
    serving = [five, seven, silent];
    const { text, error, ms } = await scrapeThrough(five);
    expect(error).toBeUndefined();
    expect(metricValue(text ?? '', 'fixture_points_total')).toBe(12);
    expect(ms).toBeGreaterThanOrEqual(1_900);
    expect(ms).toBeLessThan(4_500);
  });
});
