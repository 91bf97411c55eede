// DELIVERY=exactly-once: the positions topic, where each slot's committed journal position is written
// in the same transaction as the points it covers (write-ahead/transactions.ts), and read back, with
// read_committed, by whoever takes the slot next. Kafka Connect keeps its source offsets the same way
// (KIP-618). A compacted topic: only the newest position of each slot matters.
//
// A position is a message keyed by the slot's transactional.id, its value JSON:
//   {"journal":"<journal.id>","slot":0,"seq":12,"index":345,"at":"2026-11-27T12:00:00.000Z"}
// every record of that journal's slot up to segment `seq`, record `index`, is in Kafka, committed.
import Kafka from '@confluentinc/kafka-javascript';
import type { ProducedBatch } from './producer.js';

export interface JournalPosition {
  /** The journal directory's identity (journal/journal-id.ts): a position counts in one journal only. */
  readonly journal: string;
  readonly slot: number;
  /** The segment's number, and the record's index in it. */
  readonly seq: number;
  readonly index: number;
}

/** Whether the record (seq, index) of a slot is at or before the position. */
export function covers(position: JournalPosition, seq: number, index: number): boolean {
  return seq < position.seq || (seq === position.seq && index <= position.index);
}

/** One position message, keyed, as produceBatch takes it. */
export function positionMessage(key: string, position: JournalPosition): ProducedBatch {
  const value = Buffer.from(JSON.stringify({ ...position, at: new Date().toISOString() }));
  const keyBytes = Buffer.from(key);
  return { count: 1, data: Buffer.concat([value, keyBytes]), messages: Uint32Array.of(0, value.length, value.length, value.length + keyBytes.length) };
}

function parsePosition(value: Buffer | null | undefined): JournalPosition | null {
  if (value === null || value === undefined) return null; // a tombstone
  try {
    const p = JSON.parse(value.toString('utf8')) as Partial<JournalPosition>;
    if (typeof p.journal === 'string' && Number.isInteger(p.slot) && Number.isInteger(p.seq) && Number.isInteger(p.index)) {
      return { journal: p.journal, slot: p.slot!, seq: p.seq!, index: p.index! };
    }
  } catch {
    // not ours: ignored
  }
  return null;
}

/**
 * The positions topic does not exist (the start stops), or could not be read to its end in time
 * (`transient`: a broker killed or a leader moving meanwhile; the process starts again and retries).
 */
export class PositionsUnavailable extends Error {
  override name = 'PositionsUnavailable';
  constructor(
    message: string,
    readonly transient = false,
  ) {
    super(message);
  }
}

export interface ReadPositionsOptions {
  brokers: string;
  topic: string;
  /** The keys (transactional ids) whose newest committed position is wanted. */
  keys: readonly string[];
  /** The connection's own properties (security, SASL, SSL) of MQ_OPT_*. */
  connection: Readonly<Record<string, string>>;
  timeoutMs: number;
}

/** Messages read back from each partition's end first; the whole partition when a key is not among them. */
const TAIL_MESSAGES = 100_000;

/**
 * The newest committed position of each key that has one. Reads each partition of the topic with
 * read_committed up to its end as it was when called: a position of an aborted transaction (a
 * fenced or crashed holder's) is never seen, and one committed before the call always is. Throws
 * PositionsUnavailable when the topic does not exist or cannot be read within timeoutMs.
 */
export async function readPositions(opts: ReadPositionsOptions): Promise<Map<string, JournalPosition>> {
  const consumer = new Kafka.KafkaConsumer(
    {
      'metadata.broker.list': opts.brokers,
      'group.id': 'track-ingest-positions',
      'enable.auto.commit': false,
      'isolation.level': 'read_committed',
      'enable.partition.eof': true,
      ...opts.connection,
    },
    { 'auto.offset.reset': 'earliest' },
  );
  const deadline = Date.now() + opts.timeoutMs;
  const left = () => Math.max(1, deadline - Date.now());
  await call<unknown>((cb) => consumer.connect({ timeout: left() }, cb));
  try {
    const metadata = await call<Kafka.Metadata>((cb) => consumer.getMetadata({ topic: opts.topic, timeout: left() }, cb));
    const partitions = metadata.topics.find((t) => t.name === opts.topic)?.partitions.map((p) => p.id) ?? [];
    if (partitions.length === 0) {
      throw new PositionsUnavailable(
        `the positions topic ${opts.topic} (MQ_POSITIONS_TOPIC) does not exist on ${opts.brokers}: create it compacted, e.g. kafka-topics.sh --create --topic ${opts.topic} --partitions 1 --config cleanup.policy=compact (make run does on its local broker)`,
      );
    }
    const ends = await Promise.all(
      partitions.map(async (partition) => {
        const w = await call<Kafka.WatermarkOffsets>((cb) => consumer.queryWatermarkOffsets(opts.topic, partition, left(), cb));
        return { partition, low: w.lowOffset, high: w.highOffset };
      }),
    );
    let found = await readRanges(
      consumer,
      opts.topic,
      ends.map((e) => ({ ...e, from: Math.max(e.low, e.high - TAIL_MESSAGES) })),
      opts.keys,
      deadline,
    );
    const cut = ends.some((e) => e.high - TAIL_MESSAGES > e.low);
    if (cut && opts.keys.some((k) => !found.has(k)))
      found = await readRanges(
        consumer,
        opts.topic,
        ends.map((e) => ({ ...e, from: e.low })),
        opts.keys,
        deadline,
      );
    return found;
  } finally {
    await new Promise<void>((resolve) => consumer.disconnect(() => resolve()));
  }
}

/**
 * Reads each range [from, high) and keeps the newest position of each wanted key. A partition is read
 * once librdkafka says it reached its end at `high` or beyond: with read_committed that end is the last
 * stable offset, which another slot's open transaction holds back for a commit interval or so.
 */
async function readRanges(
  consumer: Kafka.KafkaConsumer,
  topic: string,
  ranges: readonly { partition: number; from: number; high: number }[],
  keys: readonly string[],
  deadline: number,
): Promise<Map<string, JournalPosition>> {
  const wanted = new Set(keys);
  const found = new Map<string, JournalPosition>();
  const open = new Map(ranges.filter((r) => r.high > r.from).map((r) => [r.partition, r.high]));
  if (open.size === 0) return found;
  const onEof = (eof: { partition: number; offset: number }) => {
    if (eof.offset >= (open.get(eof.partition) ?? Infinity)) open.delete(eof.partition);
  };
  consumer.on('partition.eof', onEof);
  consumer.assign(ranges.filter((r) => open.has(r.partition)).map((r) => ({ topic, partition: r.partition, offset: r.from })));
  try {
    while (open.size > 0) {
      if (Date.now() > deadline) {
        throw new PositionsUnavailable(
          `cannot read the positions topic ${topic} to its end in time (partitions ${[...open.keys()].join(', ')} not read): a transaction left open holds read_committed readers back until TRANSACTION_TIMEOUT_MS, or its leader is moving`,
          true,
        );
      }
      const messages = await call<Kafka.Message[]>((cb) => consumer.consume(1000, cb));
      for (const m of messages) {
        const key = m.key?.toString() ?? '';
        if (!wanted.has(key)) continue;
        const position = parsePosition(m.value);
        if (position === null) found.delete(key);
        else found.set(key, position);
      }
    }
  } finally {
    consumer.removeListener('partition.eof', onEof);
    consumer.unassign();
  }
  return found;
}

/** The binding's callback form as a promise, its errors kept. */
function call<T>(f: (cb: (err: Kafka.LibrdKafkaError | null | undefined, value: T) => void) => void): Promise<T> {
  return new Promise((resolve, reject) => f((err, value) => (err ? reject(err) : resolve(value))));
}
