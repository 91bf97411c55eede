// The worker metrics of the Kafka side: what Kafka acknowledged and how fast, the brokers as
// librdkafka's statistics see them, the transactions of DELIVERY=exactly-once, and the
// refused-requests topic. metrics.ts composes them with the HTTP and journal families.
import client from 'prom-client';
import { CountedHistogram } from './counted-histogram.js';
import { METRIC_PREFIX, type Registrar } from './registrar.js';

const { Counter, Gauge } = client;

/** Why a refused request was not written to MQ_REFUSED_TOPIC (the label values of its counter). */
export const REFUSED_DROPPED = ['over_rate', 'unavailable', 'queue_full', 'failed'] as const;

/**
 * The refused-requests topic (MQ_REFUSED_TOPIC, refused/refused-requests.ts); 0 while it is off. What
 * was dropped is counted as plain numbers, read at scrape time: a flood counts thousands a second,
 * and a prom-client child hashes its labels on every call.
 */
export function refusedMetrics({ registers, delta }: Registrar) {
  const refusedWritten = new Counter({
    name: `${METRIC_PREFIX}refused_requests_written_total`,
    help: 'Requests refused for their content (400, 413, 415) written to MQ_REFUSED_TOPIC and acknowledged by Kafka.',
    registers,
  });
  const refusedDropped = Object.fromEntries(REFUSED_DROPPED.map((reason) => [reason, 0])) as Record<(typeof REFUSED_DROPPED)[number], number>;
  new Counter({
    name: `${METRIC_PREFIX}refused_requests_dropped_total`,
    help: 'Requests refused for their content and not written to MQ_REFUSED_TOPIC, by reason: over_rate (more than MQ_REFUSED_RATE a second in this worker), unavailable (the worker stopping, or librdkafka refused it), queue_full (its queue full, or ten seconds of MQ_REFUSED_RATE waiting for a connection), failed (Kafka did not take it: the topic missing, no leader; logged; or still waiting for a connection when the worker stopped).',
    labelNames: ['reason'] as const,
    registers,
    collect() {
      for (const reason of REFUSED_DROPPED) this.labels(reason).inc(delta(`refused-dropped:${reason}`, refusedDropped[reason]));
    },
  });
  return { refusedWritten, refusedDropped };
}

/** DELIVERY=exactly-once: the transactions of the slots (write-ahead/transactions.ts). */
export function transactionMetrics({ registers }: Registrar) {
  const transactions = new Counter({
    name: `${METRIC_PREFIX}transactions_total`,
    help: 'DELIVERY=exactly-once: Kafka transactions ended, by outcome: committed, or aborted (their records produced again in the next one).',
    labelNames: ['outcome'] as const,
    registers,
  });
  const recoveredCommitted = new Counter({
    name: `${METRIC_PREFIX}journal_records_already_committed_total`,
    help: 'DELIVERY=exactly-once: records an earlier process left in the journal that a committed transaction had covered: marked done, not produced again.',
    registers,
  });
  // What holds read_committed consumers back beyond the commit interval: a partition's last stable
  // offset waits for the open transaction of every slot that wrote to it.
  const transactionCommit = new CountedHistogram(
    `${METRIC_PREFIX}transaction_commit_seconds`,
    "DELIVERY=exactly-once: each committed transaction, from the end of its interval (or its size limit) to the broker's answer to the commit: what a read_committed consumer waits beyond TRANSACTION_COMMIT_INTERVAL_MS.",
    [0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers,
  );
  return { transactions, recoveredCommitted, transactionCommit };
}

/** What Kafka acknowledged, what failed, and how long it took. */
export function deliveryMetrics({ registers }: Registrar) {
  const delivered = new Counter({
    name: `${METRIC_PREFIX}messages_delivered_total`,
    help: 'Messages acknowledged by Kafka (acks=all), as librdkafka counted them.',
    registers,
  });
  const deliveryErrors = new Counter({
    name: `${METRIC_PREFIX}delivery_errors_total`,
    help: 'Messages whose delivery failed after they were accepted, by librdkafka error code name.',
    labelNames: ['code'] as const,
    registers,
  });
  // ACK_MODE=async: per request, observed when the last acknowledgement of its journal record is read
  // (every 10 ms poll: that is its resolution). ACK_MODE=delivered: per message, from its report.
  const deliveryLatency = new CountedHistogram(
    `${METRIC_PREFIX}delivery_latency_seconds`,
    "From the hand-over to librdkafka to Kafka's acknowledgement: per request in ACK_MODE=async (all its points, read every 10 ms), per message in ACK_MODE=delivered.",
    [0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers,
  );
  const deliveryLatencyEstimate = new Gauge({
    name: `${METRIC_PREFIX}delivery_latency_estimate_seconds`,
    help: 'Accept to Kafka acknowledgement, estimated from librdkafka statistics windows (producer queue + request queue + round trip, per quantile); the highest over brokers and workers. Both ACK_MODEs.',
    labelNames: ['quantile'] as const,
    aggregator: 'max',
    registers,
  });
  return { delivered, deliveryErrors, deliveryLatency, deliveryLatencyEstimate };
}

/** The brokers as librdkafka's statistics see them (kafka/statistics.ts sets these). */
export function brokerMetrics({ registers }: Registrar) {
  const brokerUp = new Gauge({
    name: `${METRIC_PREFIX}kafka_brokers_up`,
    help: 'Brokers this worker holds an open connection to (summed over workers).',
    registers,
  });
  const brokerRtt = new Gauge({
    name: `${METRIC_PREFIX}kafka_broker_rtt_seconds`,
    help: 'Broker round-trip time (librdkafka statistics, window p99), the highest over workers.',
    labelNames: ['broker'] as const,
    aggregator: 'max',
    registers,
  });
  const brokerInflight = new Gauge({
    name: `${METRIC_PREFIX}kafka_inflight_requests`,
    help: 'Produce requests sent and awaiting a response (librdkafka waitresp_cnt).',
    labelNames: ['broker'] as const,
    registers,
  });
  const brokerSilent = new Gauge({
    name: `${METRIC_PREFIX}kafka_broker_silent_seconds`,
    help: 'How long a broker has left requests unanswered (librdkafka waitresp_cnt > 0 and no response received); 0 while it answers. The highest over workers.',
    labelNames: ['broker'] as const,
    aggregator: 'max',
    registers,
  });
  const stalled = new Gauge({
    name: `${METRIC_PREFIX}kafka_stalled`,
    help: 'Workers refusing points because a broker has answered nothing for BROKER_DOWN_GRACE_MS while requests wait (summed over workers).',
    registers,
  });
  const retries = new Counter({
    name: `${METRIC_PREFIX}kafka_request_retries_total`,
    help: 'Requests librdkafka retried towards a broker (statistics txretries).',
    labelNames: ['broker'] as const,
    registers,
  });
  const batchSize = new Gauge({
    name: `${METRIC_PREFIX}kafka_batch_messages`,
    help: 'Messages per produce batch to the topic (librdkafka statistics batchcnt, window average), averaged over workers.',
    aggregator: 'average',
    registers,
  });
  return { brokerUp, brokerRtt, brokerInflight, brokerSilent, stalled, retries, batchSize };
}
