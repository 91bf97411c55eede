// Shared by the tests and the benchmarks (support/). Real Kafka for the integration tests: a fresh topic per test file, and a consumer that reads a
// topic back from the start. A broker that cannot be reached fails the test; nothing is mocked.
import { randomUUID } from 'node:crypto';
import Kafka from '@confluentinc/kafka-javascript';

export const BROKERS = process.env.MQ_BROKERS ?? '127.0.0.1:9092';

export function uniqueTopic(name: string): string {
  return `test.${name}.${randomUUID().slice(0, 8)}`;
}

function admin(brokers = BROKERS) {
  return Kafka.AdminClient.create({ 'metadata.broker.list': brokers, 'client.id': 'tests' });
}

export async function createTopic(
  topic: string,
  partitions = 6,
  replicationFactor = 1,
  opts: { brokers?: string; config?: Record<string, string> } = {},
): Promise<string> {
  const brokers = opts.brokers ?? BROKERS;
  const client = admin(brokers);
  try {
    await new Promise<void>((resolve, reject) =>
      client.createTopic({ topic, num_partitions: partitions, replication_factor: replicationFactor, config: opts.config ?? {} }, 15_000, (err) =>
        err ? reject(new Error(`cannot create topic ${topic} on ${brokers}: ${err.message}`)) : resolve(),
      ),
    );
  } finally {
    client.disconnect();
  }
  return topic;
}

/** The node id of the leader of one partition (-1 while it has none). */
export async function leaderOf(topic: string, partition: number, brokers = BROKERS): Promise<number> {
  const producer = new Kafka.Producer({ 'metadata.broker.list': brokers, 'client.id': 'tests-metadata' });
  await new Promise<void>((resolve, reject) => producer.connect({ timeout: 15_000 }, (err) => (err ? reject(err) : resolve())));
  try {
    const metadata = await new Promise<Kafka.Metadata>((resolve, reject) =>
      producer.getMetadata({ topic, timeout: 10_000 }, (err, m) => (err ? reject(err) : resolve(m))),
    );
    return metadata.topics.find((t) => t.name === topic)?.partitions.find((p) => p.id === partition)?.leader ?? -1;
  } finally {
    await new Promise<void>((resolve) => producer.disconnect(() => resolve()));
  }
}

export async function deleteTopic(topic: string): Promise<void> {
  const client = admin();
  await new Promise<void>((resolve) => client.deleteTopic(topic, 10_000, () => resolve()));
  client.disconnect();
}

export interface ConsumedMessage {
  key: string;
  value: string;
  /** The value's bytes (a registry format's are binary). */
  bytes: Buffer;
  partition: number;
  offset: number;
  timestamp: number;
  /** The message's headers, each value as text (a name given twice: the last). */
  headers: Record<string, string>;
}

/**
 * Reads the topic from offset 0 until `expected` messages arrived, or until `idleMs` passed without a
 * new message once that many are there (to catch extras), or the deadline. With `toEnd`, until every
 * partition is read to its end instead. Returns what it read.
 */
export async function consumeAll(
  topic: string,
  opts: {
    expected: number;
    partitions?: number;
    timeoutMs?: number;
    idleMs?: number;
    brokers?: string;
    giveUpIdleMs?: number;
    /** librdkafka's default, read_committed, or read_uncommitted (the Java client's default): aborted transactions' messages too. */
    isolation?: 'read_committed' | 'read_uncommitted';
    /**
     * The producers are done (the caller waited for them: every journal empty): each partition is read
     * to its end as it is now (librdkafka's partition EOF: the high watermark, or the last stable offset
     * for read_committed), and the read stops there, however many messages it found. Nothing can come
     * after it: no idle wait for extras. Fewer than `expected` there, the read goes on until nothing new
     * came for `giveUpIdleMs` (10 s), at the end of every partition: a loss to report. `idleMs` does not apply.
     */
    toEnd?: boolean;
  },
): Promise<ConsumedMessage[]> {
  const partitions = opts.partitions ?? 6;
  const consumer = new Kafka.KafkaConsumer(
    {
      'metadata.broker.list': opts.brokers ?? BROKERS,
      'group.id': `tests-${randomUUID()}`,
      'enable.auto.commit': false,
      'isolation.level': opts.isolation ?? 'read_committed',
      'enable.partition.eof': opts.toEnd === true,
    },
    { 'auto.offset.reset': 'earliest' },
  );
  // A batch returns once it is full or after this long: the end of a topic is seen within it.
  if (opts.toEnd) consumer.setDefaultConsumeTimeout(100);
  // The partitions read to their end since their last message (the events come in order with the messages).
  const atEnd = new Set<number>();
  consumer.on('partition.eof', (eof) => atEnd.add(eof.partition));
  consumer.on('data', (m) => atEnd.delete(m.partition));
  await new Promise<void>((resolve, reject) => consumer.connect({ timeout: 15_000 }, (err) => (err ? reject(err) : resolve())));
  consumer.assign(Array.from({ length: partitions }, (_, partition) => ({ topic, partition, offset: 0 })));
  const out: ConsumedMessage[] = [];
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
  const idleMs = opts.idleMs ?? 500;
  let lastNew = Date.now();
  try {
    while (Date.now() < deadline) {
      const batch = await new Promise<Kafka.Message[]>((resolve, reject) => consumer.consume(1000, (err, messages) => (err ? reject(err) : resolve(messages))));
      for (const m of batch) {
        out.push({
          key: m.key === null || m.key === undefined ? '' : m.key.toString(),
          value: m.value?.toString() ?? '',
          bytes: m.value ?? Buffer.alloc(0),
          partition: m.partition,
          offset: m.offset,
          timestamp: m.timestamp ?? 0,
          headers: Object.fromEntries((m.headers ?? []).flatMap((h) => Object.entries(h).map(([k, v]) => [k, v.toString()]))),
        });
      }
      if (batch.length > 0) lastNew = Date.now();
      if (opts.toEnd) {
        // Fewer than expected at the end: a read_committed end (the last stable offset) may still be
        // held by a transaction the broker has yet to abort; read on until nothing new came for giveUpIdleMs.
        if (atEnd.size === partitions && (out.length >= opts.expected || Date.now() - lastNew >= (opts.giveUpIdleMs ?? 10_000))) break;
        continue;
      }
      if (out.length >= opts.expected && Date.now() - lastNew >= idleMs) break;
      // Fewer than expected and nothing new for this long: the rest is not coming (a loss to report).
      if (opts.giveUpIdleMs !== undefined && out.length > 0 && Date.now() - lastNew >= opts.giveUpIdleMs) break;
      if (batch.length === 0) await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    await new Promise<void>((resolve) => consumer.disconnect(() => resolve()));
  }
  return out;
}
