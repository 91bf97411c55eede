// librdkafka's statistics (STATISTICS.md), emitted every STATS_INTERVAL_MS: the fields this service
// reads, and their export to Prometheus. The broker state reads them too (producer.ts, broker-state.ts).
import type { WorkerMetrics } from '../metrics/metrics.js';
import type { BrokerStatsSample } from './broker-silence.js';

interface Window {
  p50: number;
  p99: number;
  cnt: number;
}

export interface BrokerStats extends BrokerStatsSample {
  txretries: number;
  int_latency?: Window;
  outbuf_latency?: Window;
  rtt?: Window;
}

export interface Statistics {
  /** When librdkafka took them: its rd_clock(), CLOCK_MONOTONIC in microseconds. */
  ts: number;
  /** Messages (and their bytes) in librdkafka's queues: enqueued and neither acknowledged nor failed. */
  msg_cnt: number;
  msg_size: number;
  brokers?: Record<string, BrokerStats>;
  topics?: Record<string, { partitions?: Record<string, { partition: number; leader: number }>; batchcnt?: { avg: number; cnt: number } }>;
}

/** The brokers by node id (bootstrap entries, nodeid < 0, are not brokers). */
export function realBrokers(stats: Statistics): BrokerStats[] {
  return Object.values(stats.brokers ?? {}).filter((b) => b.nodeid >= 0);
}

/**
 * The node ids leading the topic's partitions (none while no partition has a leader), or null when
 * these statistics do not say: right after connecting, the topic appears before its metadata does,
 * without partitions.
 */
export function topicLeaders(stats: Statistics, topic: string): number[] | null {
  const partitions = Object.values(stats.topics?.[topic]?.partitions ?? {}).filter((p) => p.partition >= 0);
  return partitions.length === 0 ? null : [...new Set(partitions.map((p) => p.leader).filter((id) => id >= 0))];
}

/** Sets the Kafka gauges and counters of the worker's metrics from each statistics event. */
export class StatisticsExporter {
  /** txretries is cumulative per broker: the counter gets the increments. */
  private readonly retriesSeen = new Map<string, number>();

  constructor(
    private readonly metrics: WorkerMetrics,
    private readonly topic: string,
  ) {}

  export(stats: Statistics): void {
    const m = this.metrics;
    let up = 0;
    let p50 = 0;
    let p99 = 0;
    for (const b of realBrokers(stats)) {
      const broker = String(b.nodeid);
      if (b.state === 'UP') up++;
      // Enqueue to acknowledgement ≈ time in the producer queue + in the request queue + round trip.
      const parts = [b.int_latency, b.outbuf_latency, b.rtt].filter((w): w is Window => w !== undefined && w.cnt > 0);
      if (parts.length === 3) {
        p50 = Math.max(
          p50,
          parts.reduce((sum, w) => sum + w.p50, 0),
        );
        p99 = Math.max(
          p99,
          parts.reduce((sum, w) => sum + w.p99, 0),
        );
      }
      if (b.rtt !== undefined && b.rtt.cnt > 0) m.brokerRtt.labels(broker).set(b.rtt.p99 / 1e6);
      m.brokerInflight.labels(broker).set(b.waitresp_cnt);
      const seen = this.retriesSeen.get(b.name) ?? 0;
      if (b.txretries > seen) m.retries.labels(broker).inc(b.txretries - seen);
      this.retriesSeen.set(b.name, b.txretries);
    }
    m.brokerUp.set(up);
    if (p99 > 0) {
      m.deliveryLatencyEstimate.labels('0.5').set(p50 / 1e6);
      m.deliveryLatencyEstimate.labels('0.99').set(p99 / 1e6);
    }
    const batches = stats.topics?.[this.topic]?.batchcnt;
    if (batches !== undefined && batches.cnt > 0) m.batchSize.set(batches.avg);
  }
}
