// The producer queue's depth: librdkafka's count from its statistics, plus what was handed over since.
import { describe, expect, it } from 'vitest';
import { QueueAccounting } from '../../../src/kafka/queue-accounting.js';

describe('QueueAccounting', () => {
  it('counts what was handed over since the last statistics on top of librdkafka queue depth', () => {
    const q = new QueueAccounting();
    q.added(100, 10_000);
    expect([q.points, q.bytes]).toEqual([100, 10_000]);
    // librdkafka still holds 40 of them; 60 were acknowledged.
    expect(q.onStatistics(40, 4_000, 0)).toBe(60);
    q.added(10, 1_000);
    expect([q.points, q.bytes]).toEqual([50, 5_000]);
  });

  it('reports each acknowledgement once, and does not count failed points as acknowledged', () => {
    const q = new QueueAccounting();
    q.added(100, 0);
    expect(q.onStatistics(100, 0, 0)).toBe(0);
    expect(q.onStatistics(30, 0, 20)).toBe(50);
    expect(q.onStatistics(30, 0, 20)).toBe(0);
    expect(q.onStatistics(0, 0, 20)).toBe(30);
  });

  it('counts as full from a refusal until statistics show a point leaving the queue, the only way its depth goes down', () => {
    const q = new QueueAccounting();
    q.added(95, 0);
    q.onStatistics(95, 0, 0);
    expect(q.full).toBe(false);
    q.refused(); // a request of 10 did not fit below a limit of 100
    expect(q.full).toBe(true);
    // Kafka took nothing yet (linger, a slow broker): no more room than at the refusal.
    q.onStatistics(95, 0, 0);
    expect(q.full).toBe(true);
    q.onStatistics(94, 0, 0); // one acknowledged
    expect(q.full).toBe(false);
    q.refused();
    q.onStatistics(90, 0, 4); // four failed: they left the queue too
    expect(q.full).toBe(false);
  });

  it('does not stay full on an empty queue (a request larger than the limits on its own)', () => {
    const q = new QueueAccounting();
    q.refused();
    q.onStatistics(0, 0, 0);
    expect(q.full).toBe(false);
  });
});
