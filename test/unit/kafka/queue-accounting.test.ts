// The producer queue's depth: librdkafka's count from its statistics, plus what was handed over since
// librdkafka took them. Times are on performance.now()'s scale, in milliseconds.
import { describe, expect, it } from 'vitest';
import { QueueAccounting } from '../../../src/kafka/queue-accounting.js';
import { statisticsTakenAt, type Statistics } from '../../../src/kafka/statistics.js';

// JavaScript reads each statistics event 5 ms after librdkafka took it.
const statistics = (q: QueueAccounting, queued: number, bytes: number, failed: number, takenAt: number) => q.onStatistics(queued, bytes, failed, takenAt, takenAt + 5);

describe('QueueAccounting', () => {
  it('counts what was handed over since the last statistics on top of librdkafka queue depth', () => {
    const q = new QueueAccounting();
    q.added(100, 10_000, 1_000);
    expect([q.points, q.bytes]).toEqual([100, 10_000]);
    // librdkafka still holds 40 of them; 60 were acknowledged.
    expect(statistics(q, 40, 4_000, 0, 1_100)).toBe(60);
    q.added(10, 1_000, 1_150);
    expect([q.points, q.bytes]).toEqual([50, 5_000]);
  });

  it('keeps counting what was enqueued after librdkafka took its statistics and before JavaScript read them', () => {
    const q = new QueueAccounting();
    q.added(100, 10_000, 1_000);
    // librdkafka counts its queue at 1,100 ms (100 queued); the event reaches JavaScript at 1,115 ms,
    // after two more requests were enqueued at 1,105 and 1,110.
    q.added(50, 5_000, 1_105);
    q.added(50, 5_000, 1_110);
    expect(statistics(q, 100, 10_000, 0, 1_100)).toBe(0);
    // Those 100 are not in librdkafka's count: still queued, not acknowledged, and not dropped.
    expect([q.points, q.bytes]).toEqual([200, 20_000]);
    // The next statistics count them.
    expect(statistics(q, 60, 6_000, 0, 1_200)).toBe(140);
    expect([q.points, q.bytes]).toEqual([60, 6_000]);
  });

  it('counts an enqueue just before the statistics clock as not yet in them: twice for a moment, never missing', () => {
    const q = new QueueAccounting();
    q.added(10, 100, 1_000);
    q.added(10, 100, 1_099.5); // within librdkafka's margin between counting and reading its clock
    expect(statistics(q, 20, 200, 0, 1_100)).toBe(0);
    expect(q.points).toBe(30);
    expect(statistics(q, 20, 200, 0, 1_200)).toBe(0);
    expect(q.points).toBe(20);
  });

  it('acknowledges every point once over many statistics at a high request rate', () => {
    const q = new QueueAccounting();
    let t = 0;
    let acknowledged = 0;
    for (let stats = 1; stats <= 50; stats++) {
      for (let i = 0; i < 6_400; i++) q.added(1, 10, (t += 1 / 64)); // 64,000 requests a second
      acknowledged += statistics(q, 0, 0, 0, t);
      // At most 3 ms of them counted on top (the 2 ms margin and a 1 ms history entry), both ends included.
      expect(q.points).toBeLessThanOrEqual(3 * 64 + 1);
    }
    acknowledged += statistics(q, 0, 0, 0, t + 100);
    expect([acknowledged, q.points, q.bytes]).toEqual([320_000, 0, 0]);
  });

  it('reports each acknowledgement once, and does not count failed points as acknowledged', () => {
    const q = new QueueAccounting();
    q.added(100, 0, 0);
    expect(statistics(q, 100, 0, 0, 100)).toBe(0);
    expect(statistics(q, 30, 0, 20, 200)).toBe(50);
    expect(statistics(q, 30, 0, 20, 300)).toBe(0);
    expect(statistics(q, 0, 0, 20, 400)).toBe(30);
  });

  it('counts as full from a refusal until statistics show a point leaving the queue, the only way its depth goes down', () => {
    const q = new QueueAccounting();
    q.added(95, 0, 0);
    statistics(q, 95, 0, 0, 100);
    expect(q.full).toBe(false);
    q.refused(); // a request of 10 did not fit below a limit of 100
    expect(q.full).toBe(true);
    // Kafka took nothing yet (linger, a slow broker): no more room than at the refusal.
    statistics(q, 95, 0, 0, 200);
    expect(q.full).toBe(true);
    statistics(q, 94, 0, 0, 300); // one acknowledged
    expect(q.full).toBe(false);
    q.refused();
    statistics(q, 90, 0, 4, 400); // four failed: they left the queue too
    expect(q.full).toBe(false);
  });

  it('does not stay full on an empty queue (a request larger than the limits on its own)', () => {
    const q = new QueueAccounting();
    q.refused();
    statistics(q, 0, 0, 0, 100);
    expect(q.full).toBe(false);
  });

  it('trusts no statistics time from the future or from long ago, and still consumes what was enqueued', () => {
    const q = new QueueAccounting();
    q.added(100, 1_000, 10_000);
    // A clock hours ahead (rd_clock() on a platform without CLOCK_MONOTONIC): read as "now".
    expect(q.onStatistics(0, 0, 0, 10_000 + 3_600_000, 10_005)).toBe(100);
    q.added(100, 1_000, 20_000);
    // A clock hours behind: read as a second before now, which the enqueue was before.
    expect(q.onStatistics(0, 0, 0, 20_000 - 3_600_000, 21_005)).toBe(100);
    expect([q.points, q.bytes]).toEqual([0, 0]);
    q.added(100, 1_000, 30_000);
    expect(q.onStatistics(0, 0, 0, Number.NaN, 30_005)).toBe(100);
  });

  it('reads librdkafka statistics time (CLOCK_MONOTONIC µs) on performance.now()\'s scale', () => {
    const monotonicMicros = Number(process.hrtime.bigint() / 1000n);
    expect(Math.abs(statisticsTakenAt({ ts: monotonicMicros } as Statistics) - performance.now())).toBeLessThan(1);
  });
});
