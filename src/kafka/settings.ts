// The librdkafka settings of the producer: what the contract fixes (batching, idempotence, acks=all,
// the Java client's partitioner), the queue limits sized from our own, and MQ_OPT_* on top; each
// property put where librdkafka reads it.
//
// Why the scope matters: librdkafka has global properties and topic-level ones (message.timeout.ms,
// request.timeout.ms, acks, partitioner, compression...). A topic-level property set on the global
// configuration goes to its default topic configuration, and the binding replaces that with the
// topic configuration it is given: every topic-level property set globally was dropped, silently
// (librdkafka logs a CONFWARN about it at start-up, as a warning). So each property is offered to a
// topic configuration first, and goes to the global one only if librdkafka does not know it there.
import Kafka from '@confluentinc/kafka-javascript';
import { ConfigError, type Config, PRODUCER_OPTION_PREFIX, type RefusedTopic } from '../config.js';
import { CONTAINER_ID_MAX_LENGTH } from '../track-point/schema.js';

/** Statistics drive the queue accounting, readiness and the Kafka metrics: 10 a second. */
export const STATS_INTERVAL_MS = 100;
/** librdkafka's default `message.max.bytes`; overridable through MQ_OPT_MESSAGE_MAX_BYTES. */
const DEFAULT_MESSAGE_MAX_BYTES = 1_000_000;

export interface ProducerSettings {
  global: Kafka.ProducerGlobalConfig;
  topic: Kafka.ProducerTopicConfig;
}

type Properties = Record<string, string | number | boolean>;

/**
 * The producer's properties, split by scope. MQ_OPT_* may override any of ours, at the operator's
 * risk. Throws ConfigError naming the MQ_OPT_* variable (or, for ours, the variable it comes from)
 * when librdkafka does not know a property or refuses its value.
 */
export function producerSettings(config: Config, clientId: string, transactionalId: string | null = null): ProducerSettings {
  const ours = { ...serviceProperties(config, clientId), ...(transactionalId === null ? {} : transactionalProperties(config, transactionalId)) };
  const global: Properties = {};
  const topic: Properties = {};
  const place = (name: string, value: string | number | boolean, variable: string) => {
    const scope = scopeOf(name, value, variable);
    // A property given in one scope by us and in the other by MQ_OPT_* cannot happen: librdkafka
    // decides the scope, by name.
    (scope === 'topic' ? topic : global)[name] = value;
  };
  for (const [name, value] of Object.entries(ours)) place(name, value, variableOf(name));
  for (const [name, value] of Object.entries(config.producerOptions)) place(name, value, optionVariable(name));
  return { global: global as Kafka.ProducerGlobalConfig, topic: topic as Kafka.ProducerTopicConfig };
}

/** The properties the service sets itself (the binding's own dr_cb / dr_msg_cb among them). */
function serviceProperties(config: Config, clientId: string): Properties {
  // librdkafka's own queue limits sit above our high-water mark, which admission holds against its own
  // count (rd_kafka_outq_len): the headroom, half the mark plus one maximal request, is for what is
  // produced again (write-ahead/replay.ts) beside new requests. Should librdkafka still refuse messages (its
  // byte limit), the request is in the journal already and they are produced again later. Its byte
  // count includes keys.
  const maxKeyBytes = CONTAINER_ID_MAX_LENGTH * 3;
  const librdMessages = Math.ceil(config.queueMaxPoints * 1.5) + config.maxPoints;
  const librdKbytes = Math.ceil((config.queueMaxBytes * 1.5 + 4 * config.maxBodyBytes + librdMessages * maxKeyBytes) / 1024);
  return {
    'metadata.broker.list': config.brokers,
    'client.id': clientId,
    'linger.ms': 10,
    'batch.num.messages': 100,
    // Idempotence implies acks=all, max.in.flight<=5 and retries without duplicates or reordering.
    'enable.idempotence': true,
    acks: -1, // "all", topic-level
    // The Java client's default, so other producers of the same keys land on the same partitions.
    partitioner: 'murmur2_random',
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
      ? // Reports only for failed messages, with the message to produce again; librdkafka counts
        // the acknowledgements per journal record (producer.ts says why).
        { dr_msg_cb: true, 'delivery.report.only.error': true }
      : // A report per message; a request waits for Kafka at most DELIVERY_TIMEOUT_MS (topic-level).
        { dr_cb: true, 'delivery.report.only.error': false, 'message.timeout.ms': config.deliveryTimeoutMs }),
  };
}

/**
 * DELIVERY=exactly-once: a slot's transactional producer. A message not delivered within the
 * transaction's timeout could not be committed anyway: librdkafka wants message.timeout.ms at most
 * transaction.timeout.ms.
 */
function transactionalProperties(config: Config, transactionalId: string): Properties {
  const timeoutMs = config.exactlyOnce?.transactionTimeoutMs ?? 60_000;
  return { 'transactional.id': transactionalId, 'transaction.timeout.ms': timeoutMs, 'message.timeout.ms': timeoutMs };
}

/** The variable an operator sets to change one of the service's own properties. */
function variableOf(name: string): string {
  if (name === 'transaction.timeout.ms') return 'TRANSACTION_TIMEOUT_MS';
  if (name === 'transactional.id') return 'INSTANCE_ID';
  if (name === 'message.timeout.ms') return 'DELIVERY_TIMEOUT_MS';
  if (name === 'metadata.broker.list') return 'MQ_BROKERS';
  return optionVariable(name);
}

/** The MQ_OPT_* variable of a librdkafka property: the inverse of config.ts's producerOptionsFrom. */
export function optionVariable(name: string): string {
  return (
    PRODUCER_OPTION_PREFIX +
    name
      .split('_')
      .map((part) => part.replace(/\./g, '_'))
      .join('__')
      .toUpperCase()
  );
}

const UNKNOWN_PROPERTY = /^No such configuration property/;

/**
 * Where librdkafka reads a property, asked of librdkafka itself: a topic configuration that takes it
 * makes it topic-level. The binding builds its configurations in the Producer's constructor and
 * starts no client until connect(), so these are configuration objects only.
 */
function scopeOf(name: string, value: string | number | boolean, variable: string): 'global' | 'topic' {
  const asTopic = refusal(() => new Kafka.Producer({}, { [name]: value } as Kafka.ProducerTopicConfig));
  if (asTopic === null) return 'topic';
  if (!UNKNOWN_PROPERTY.test(asTopic)) throw new ConfigError(variable, `librdkafka refuses ${name}=${String(value)}: ${asTopic}`);
  const asGlobal = refusal(() => new Kafka.Producer({ [name]: value } as Kafka.ProducerGlobalConfig, {}));
  if (asGlobal === null) return 'global';
  if (UNKNOWN_PROPERTY.test(asGlobal)) throw new ConfigError(variable, `librdkafka has no producer property ${name}`);
  throw new ConfigError(variable, `librdkafka refuses ${name}=${String(value)}: ${asGlobal}`);
}

function refusal(make: () => unknown): string | null {
  try {
    make();
    return null;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

/** The largest message librdkafka takes with these settings. */
export function messageMaxBytes(settings: ProducerSettings): number {
  return Number(settings.global['message.max.bytes'] ?? DEFAULT_MESSAGE_MAX_BYTES);
}

/** How long the refused-requests producer gathers messages into a batch. */
const REFUSED_LINGER_MS = 1_000;
/** How long a refused request's message may wait for Kafka before it is given up (counted). */
export const REFUSED_MESSAGE_TIMEOUT_MS = 30_000;
/** Room left in a Kafka message for a refused request's headers (its `details` are at most 100 issues). */
const REFUSED_HEADERS_ROOM = 32 * 1024;

/**
 * The settings of the refused-requests producer (kafka/refused-producer.ts): the service's, with the
 * operator's MQ_OPT_* (brokers, security), but a report per message, no statistics, batches of a
 * second, and a queue of its own sized from MQ_REFUSED_RATE: what the rate lets in during
 * REFUSED_MESSAGE_TIMEOUT_MS.
 * Throws ConfigError when a kept body could not fit in a Kafka message.
 */
export function refusedProducerSettings(config: Config, clientId: string, refused: RefusedTopic): ProducerSettings {
  const base = producerSettings(config, clientId);
  const largest = refused.maxBytes + REFUSED_HEADERS_ROOM;
  if (largest > messageMaxBytes(base)) {
    throw new ConfigError(
      'MQ_REFUSED_MAX_BYTES',
      `${refused.maxBytes} bytes of body and ${REFUSED_HEADERS_ROOM} of headers do not fit in a Kafka message of ${messageMaxBytes(base)} bytes (message.max.bytes, MQ_OPT_MESSAGE_MAX_BYTES)`,
    );
  }
  const queued = Math.ceil((refused.ratePerSecond * REFUSED_MESSAGE_TIMEOUT_MS) / 1000);
  const global: Properties = { ...(base.global as Properties) };
  delete global.dr_msg_cb;
  Object.assign(global, {
    // A second's batch: what the topic gets is evidence, not data, read by people; one produce
    // request a second instead of one per refusal spares the broker and this producer's threads.
    'linger.ms': REFUSED_LINGER_MS,
    dr_cb: true,
    'delivery.report.only.error': false,
    'statistics.interval.ms': 0,
    'queue.buffering.max.messages': queued,
    'queue.buffering.max.kbytes': Math.min(Math.ceil((queued * largest) / 1024), 2_147_483_647),
  });
  const topic: Properties = { ...(base.topic as Properties), 'message.timeout.ms': REFUSED_MESSAGE_TIMEOUT_MS };
  return { global: global as Kafka.ProducerGlobalConfig, topic: topic as Kafka.ProducerTopicConfig };
}
