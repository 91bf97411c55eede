// The event-loop delay metrics report how late a timer ran beyond its sampling interval: about 0 on
// an idle loop (prom-client's raw samples read the interval itself there), the stall on a blocked one.
import { describe, expect, it } from 'vitest';
import { EVENT_LOOP_SAMPLE_MS, EventLoopDelay } from '../../../src/metrics/event-loop-delay.js';
import { createWorkerMetrics } from '../../../src/metrics/metrics.js';
import { metricValue } from '../../helpers/service.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Blocks the loop for about `stallMs` at a time (from 3/4 to 5/4 of it, drawn), yielding between
 * stalls, for `forMs`. Stalls of one fixed length fell into step with the 20 ms sampling timer, which
 * then always came due at the same points of a stall: the longest delay it saw stayed at 4.8 ms of 8
 * in two runs on a loaded machine.
 */
async function stallRepeatedly(stallMs: number, forMs: number): Promise<void> {
  const end = performance.now() + forMs;
  while (performance.now() < end) {
    const until = performance.now() + stallMs * (0.75 + Math.random() / 2);
    while (performance.now() < until);
    await new Promise((r) => setImmediate(r));
  }
}

describe('EventLoopDelay', () => {
  it('reads about 0 on an idle loop, not the sampling interval', async () => {
    const delay = new EventLoopDelay();
    delay.start();
    await sleep(EVENT_LOOP_SAMPLE_MS * 25);
    const idle = delay.take();
    delay.stop();
    expect(idle.samples).toBeGreaterThan(10);
    // The raw samples are >= 20 ms each; beyond the interval an idle loop is late by far less.
    expect(idle.p50).toBeLessThan(0.002);
  });

  it('reads a loop blocked about 8 ms at a time as late by up to those 8 ms, and starts a new window after each read', async () => {
    const delay = new EventLoopDelay();
    delay.start();
    await stallRepeatedly(8, 600);
    const blocked = delay.take();
    await sleep(EVENT_LOOP_SAMPLE_MS * 10);
    const after = delay.take();
    delay.stop();
    expect(blocked.max).toBeGreaterThanOrEqual(0.005);
    expect(blocked.max).toBeLessThan(0.05);
    expect(blocked.p50).toBeGreaterThan(0.001);
    expect(after.max).toBeLessThan(blocked.max);
  });

  it('reads all zero before it starts (a standby that took no slot)', () => {
    expect(new EventLoopDelay().take()).toEqual({ min: 0, max: 0, mean: 0, stddev: 0, p50: 0, p90: 0, p99: 0, samples: 0 });
  });
});

describe('the event-loop metrics of a worker', () => {
  it('export the delay beyond the interval under the names prom-client gives them', async () => {
    const metrics = createWorkerMetrics('7');
    metrics.loopDelay.start();
    await sleep(EVENT_LOOP_SAMPLE_MS * 25);
    const text = await metrics.registry.metrics();
    metrics.loopDelay.stop();
    for (const s of ['min', 'max', 'mean', 'stddev', 'p50', 'p90', 'p99']) {
      expect(
        text.split('\n').filter((l) => l.startsWith(`ingest_nodejs_eventloop_lag_${s}_seconds{`)),
        s,
      ).toHaveLength(1);
    }
    expect(metricValue(text, 'ingest_nodejs_eventloop_lag_p50_seconds{worker="7"}')).toBeLessThan(0.002);
  });
});
