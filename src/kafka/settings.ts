// The librdkafka settings of the producer: what the contract fixes (batching, idempotence, acks=all,
// the Java client's partitioner), the queue limits sized from our own, and MQ_OPT_* on top.
import type Kafka from 'node-rdkafka';
import type { Config } from '../config.js';
import { CONTAINER_ID_MAX_LENGTH } from '../track-point/schema.js';

/** Statistics drive the queue accounting, readiness and the Kafka metrics: 10 a second. */
export const STATS_INTERVAL_MS = 100;
/** librdkafka's default `message.max.bytes`; overridable through MQ_OPT_MESSAGE_MAX_BYTES. */
const DEFAULT_MESSAGE_MAX_BYTES = 1_000_000;

export interface ProducerSettings {
  global: Kafka.ProducerGlobalConfig;
  topic: Kafka.ProducerTopicConfig;
}

/** The librdkafka properties the contract fixes. MQ_OPT_* may override any of them, at the operator's risk. */
export function producerSettings(config: Config, clientId: string): ProducerSettings {
  // librdkafka's own queue limits sit well above our high-water mark, so that produceBatch() never
  // meets QUEUE_FULL for a request we have admitted: our estimate of the queue lags librdkafka's by
  // what was acknowledged since its last statistics, so it errs high (queue-accounting.ts); the
  // headroom, half the high-water mark plus one maximal request, is a margin should it ever err low.
  // Its byte count includes keys.
  const maxKeyBytes = CONTAINER_ID_MAX_LENGTH * 3;
  const librdMessages = Math.ceil(config.queueMaxPoints * 1.5) + config.maxPoints;
  const librdKbytes = Math.ceil((config.queueMaxBytes * 1.5 + 4 * config.maxBodyBytes + librdMessages * maxKeyBytes) / 1024);
  const global: Kafka.ProducerGlobalConfig = {
    'metadata.broker.list': config.brokers,
    'client.id': clientId,
    'linger.ms': 10,
    'batch.num.messages': 100,
    // Idempotence implies acks=all, max.in.flight<=5 and retries without duplicates or reordering.
    'enable.idempotence': true,
    'queue.buffering.max.messages': Math.min(librdMessages, 2_147_483_647),
    'queue.buffering.max.kbytes': Math.min(librdKbytes, 2_147_483_647),
    'statistics.interval.ms': STATS_INTERVAL_MS,
    'socket.keepalive.enable': true,
    // librdkafka waits up to 10 s (+50 % jitter) before reconnecting to a broker that has failed
    // repeatedly; after a cluster outage a worker then refused points for up to 15 s after the brokers
    // were back (the full-outage test in test/faults/cluster-faults.test.ts failed on it once). The
    // Java client's default, 1 s, costs one connection attempt per broker a second during an outage.
    'reconnect.backoff.max.ms': 1_000,
    ...(config.ackMode === 'async'
      ? // Reports only for failed messages (producer.ts says why), with the message to spill;
        // for every message when DELIVERY_LATENCY_HISTOGRAM=1 asks for the latency of each.
        { dr_msg_cb: true, 'delivery.report.only.error': !config.deliveryLatencyHistogram }
      : // A report per message; a request waits for Kafka at most DELIVERY_TIMEOUT_MS.
        { dr_cb: true, 'delivery.report.only.error': false, 'message.timeout.ms': config.deliveryTimeoutMs }),
    // librdkafka accepts topic-level properties here too and applies them to every topic.
    ...(config.producerOptions as Kafka.ProducerGlobalConfig),
  };
  const topic: Kafka.ProducerTopicConfig = {
    acks: -1, // "all"
    // The Java client's default, so other producers of the same keys land on the same partitions.
    partitioner: 'murmur2_random',
  };
  return { global, topic };
}

/** The largest message librdkafka takes with these settings. */
export function messageMaxBytes(settings: ProducerSettings): number {
  return Number(settings.global['message.max.bytes'] ?? DEFAULT_MESSAGE_MAX_BYTES);
}
