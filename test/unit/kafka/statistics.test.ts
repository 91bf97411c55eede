// librdkafka's statistics to Prometheus: what each snapshot sets, and what is left out.
import { describe, expect, it } from 'vitest';
import { realBrokers, StatisticsExporter, topicLeaders, type BrokerStats, type Statistics } from '../../../src/kafka/statistics.js';
import { createWorkerMetrics } from '../../../src/metrics/metrics.js';
import { metricValue } from '../../helpers/service.js';

const window = (p50: number, p99: number) => ({ p50, p99, cnt: 10 });
const broker = (nodeid: number, over: Partial<BrokerStats> = {}): BrokerStats => ({
  name: nodeid < 0 ? 'bootstrap' : `127.0.0.1:9092/${nodeid}`,
  nodeid,
  state: 'UP',
  waitresp_cnt: 2,
  rx: 100,
  txretries: 0,
  ...over,
});
const stats = (
  brokers: BrokerStats[],
  partitions: Record<string, { partition: number; leader: number }> = {},
  batchcnt?: { avg: number; cnt: number },
): Statistics => ({
  ts: 0,
  msg_cnt: 0,
  msg_size: 0,
  brokers: Object.fromEntries(brokers.map((b) => [b.name, b])),
  topics: { t: { partitions, ...(batchcnt === undefined ? {} : { batchcnt }) } },
});

describe('realBrokers and topicLeaders', () => {
  it('leaves out the bootstrap entries (node id -1)', () => {
    expect(realBrokers(stats([broker(-1), broker(1), broker(2)])).map((b) => b.nodeid)).toEqual([1, 2]);
  });

  it('says nothing (null) until the partitions are listed, then the leaders, once each, without -1', () => {
    expect(topicLeaders(stats([]), 't')).toBeNull();
    expect(topicLeaders(stats([], { '-1': { partition: -1, leader: -1 } }), 't')).toBeNull();
    const parts = { '0': { partition: 0, leader: 1 }, '1': { partition: 1, leader: 2 }, '2': { partition: 2, leader: 1 }, '3': { partition: 3, leader: -1 } };
    expect(topicLeaders(stats([], parts), 't')?.sort()).toEqual([1, 2]);
    expect(topicLeaders(stats([], parts), 'other')).toBeNull();
  });
});

describe('StatisticsExporter', () => {
  it("sets brokers up, round trip, in-flight requests, batch size and the latency estimate (the slowest broker's sum of its three windows)", async () => {
    const metrics = createWorkerMetrics('w');
    const exporter = new StatisticsExporter(metrics, 't');
    exporter.export(
      stats(
        [
          broker(1, { rtt: window(1_000, 4_000), int_latency: window(500, 1_000), outbuf_latency: window(100, 200) }),
          broker(2, { state: 'DOWN', waitresp_cnt: 0, rtt: window(2_000, 9_000), int_latency: window(800, 3_000), outbuf_latency: window(200, 1_000) }),
          broker(-1),
        ],
        {},
        { avg: 87, cnt: 12 },
      ),
    );
    const text = await metrics.registry.metrics();
    expect(metricValue(text, 'ingest_kafka_brokers_up')).toBe(1);
    expect(metricValue(text, 'ingest_kafka_broker_rtt_seconds{broker="2"}')).toBe(0.009);
    expect(metricValue(text, 'ingest_kafka_inflight_requests{broker="1"}')).toBe(2);
    expect(metricValue(text, 'ingest_kafka_batch_messages')).toBe(87);
    expect(metricValue(text, 'ingest_delivery_latency_estimate_seconds{quantile="0.5"}')).toBeCloseTo(0.003);
    expect(metricValue(text, 'ingest_delivery_latency_estimate_seconds{quantile="0.99"}')).toBeCloseTo(0.013);
  });

  it("counts retries as increments of librdkafka's running totals, per broker", async () => {
    const metrics = createWorkerMetrics('w');
    const exporter = new StatisticsExporter(metrics, 't');
    for (const total of [0, 3, 3, 10]) exporter.export(stats([broker(1, { txretries: total })]));
    expect(metricValue(await metrics.registry.metrics(), 'ingest_kafka_request_retries_total{broker="1"}')).toBe(10);
  });
});
