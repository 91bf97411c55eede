// DELIVERY=exactly-once: librdkafka's transaction calls on a worker's producer, the messages a
// transaction produces, what librdkafka's errors let the caller do next, and the fence of another
// slot's transactional.id. The state machine that uses them is write-ahead/transactions.ts.
//
// Each call takes an explicit timeout: the binding's default of 5 s turns a slow commit into an
// abort. The binding runs a call on a thread of libuv's pool; destroying the client under it aborts
// the process inside librdkafka, so disconnect() waits for the call under way (callUnderWay).
import Kafka from '@confluentinc/kafka-javascript';
import { enqueuedBefore, type ProducedBatch } from './produce-batch.js';
import type { ProducerSettings } from './settings.js';

/**
 * What a failed transaction call lets the caller do, by librdkafka's flags
 * (rd_kafka_error_is_retriable, _txn_requires_abort, _is_fatal):
 * - retriable: the same call again;
 * - abortable: abort the transaction, and produce its messages again in the next one;
 * - fatal: the producer takes nothing more (fenced, or the transaction outlived its timeout);
 * - failed: none of these (a timeout of init, a broker without transactions): the caller decides.
 */
export type TransactionErrorClass = 'retriable' | 'abortable' | 'fatal' | 'failed';

/** librdkafka's error, as the binding passes it. */
export interface LibrdKafkaErrorFlags {
  message?: string;
  code?: number;
  isFatal?: boolean;
  isRetriable?: boolean;
  isTxnRequiresAbort?: boolean;
}

export function transactionErrorClass(err: unknown): TransactionErrorClass {
  const e = (err ?? {}) as LibrdKafkaErrorFlags;
  if (e.isFatal === true) return 'fatal';
  if (e.isRetriable === true) return 'retriable';
  if (e.isTxnRequiresAbort === true) return 'abortable';
  return 'failed';
}

/** Whether librdkafka says another producer took this one's transactional.id (a newer epoch): fatal. */
export function isFenced(err: unknown): boolean {
  const code = (err as LibrdKafkaErrorFlags | null | undefined)?.code;
  return code === Kafka.CODES.ERRORS.ERR__FENCED || code === Kafka.CODES.ERRORS.ERR_PRODUCER_FENCED;
}

/** Why librdkafka takes no more messages in the transaction under way. */
export type TransactionRefusal = 'fatal' | 'transaction_failed';

/** What write-ahead/transactions.ts needs of the producer: KafkaTransactions, or a test's fake. */
export interface TransactionalProducer {
  initTransactions(timeoutMs: number): Promise<void>;
  beginTransaction(): Promise<void>;
  commitTransaction(timeoutMs: number): Promise<void>;
  abortTransaction(timeoutMs: number): Promise<void>;
  /** Hands the messages of a batch from the `from`-th on to librdkafka; returns how many of those it took. */
  produceRest(batch: ProducedBatch, from: number, timestamp: number): number;
  /** Hands messages to librdkafka for another topic; whether it took them all. */
  produceTo(topic: string, batch: ProducedBatch): boolean;
  /** Why librdkafka refuses messages in this transaction (its fatal error, or the transaction failed), or null. */
  refusal(): TransactionRefusal | null;
  /** Acknowledgements counted per tag: read and dropped here (the commit says what Kafka has). */
  takeAcks(): Uint32Array | undefined;
}

export class KafkaTransactions implements TransactionalProducer {
  private refused: TransactionRefusal | null = null;
  private underWay: Promise<unknown> | null = null;

  constructor(
    private readonly producer: Kafka.Producer,
    private readonly topic: string,
    /** Acknowledgements counted per tag: read and dropped by the caller (the commit says what Kafka has). */
    readonly takeAcks: () => Uint32Array | undefined,
    /** A message librdkafka raised an error for: how many of `count` it took before. */
    private readonly onProduceError: (err: unknown, enqueued: number, count: number) => void,
  ) {}

  /** Fences every earlier producer of this transactional.id and aborts its open transaction. */
  initTransactions(timeoutMs: number): Promise<void> {
    return this.call((done) => this.producer.initTransactions(timeoutMs, done));
  }

  beginTransaction(): Promise<void> {
    if (this.refused === 'transaction_failed') this.refused = null;
    return this.call((done) => this.producer.beginTransaction(done));
  }

  /** Flushes what the transaction produced, then commits it. */
  commitTransaction(timeoutMs: number): Promise<void> {
    return this.call((done) => this.producer.commitTransaction(timeoutMs, done));
  }

  abortTransaction(timeoutMs: number): Promise<void> {
    return this.call((done) => this.producer.abortTransaction(timeoutMs, done));
  }

  /**
   * Why librdkafka refuses messages in this transaction, or null: 'fatal' once it raised its fatal
   * error (the next transaction call returns it), 'transaction_failed' once the transaction failed (a
   * message of it timed out or was refused): nothing is taken until it is aborted.
   */
  refusal(): TransactionRefusal | null {
    return this.refused;
  }

  /** The call under way, settled either way, or null: disconnecting under it would crash the process. */
  callUnderWay(): Promise<unknown> | null {
    return this.underWay;
  }

  /**
   * Hands the messages of a batch from the `from`-th on to librdkafka (what a full queue refused
   * before); returns how many of those it took.
   */
  produceRest(batch: ProducedBatch, from: number, timestamp: number): number {
    const rest = from === 0 ? batch : { count: batch.count - from, data: batch.data, messages: batch.messages.subarray(4 * from) };
    try {
      return this.producer.produceBatch(this.topic, rest.data, rest.messages, 0, timestamp);
    } catch (err) {
      const code = (err as LibrdKafkaErrorFlags).code;
      if (code === Kafka.CODES.ERRORS.ERR__FATAL) this.refused = 'fatal';
      else if (code === Kafka.CODES.ERRORS.ERR__STATE && this.refused === null) this.refused = 'transaction_failed';
      const enqueued = enqueuedBefore(err);
      this.onProduceError(err, enqueued, rest.count);
      return enqueued;
    }
  }

  /**
   * Hands messages to librdkafka for `topic` (a transaction's position), keyed, with the current
   * time; whether it took them all (a full queue takes fewer), and throws what librdkafka raises.
   */
  produceTo(topic: string, batch: ProducedBatch): boolean {
    return this.producer.produceBatch(topic, batch.data, batch.messages, 0, Date.now()) === batch.count;
  }

  private call(call: (done: (err: Kafka.LibrdKafkaError | null | undefined) => void) => void): Promise<void> {
    const result = settled(call);
    const underWay = result
      .catch(() => undefined)
      .finally(() => {
        if (this.underWay === underWay) this.underWay = null;
      });
    this.underWay = underWay;
    return result;
  }
}

/**
 * Fences every producer of the transactional.id in `settings` (a producer of that id calls
 * initTransactions, which aborts the last holder's open transaction, then disconnects): what slot 0
 * does for the slots whose files it took over, as Kafka Connect fences the tasks of an earlier generation.
 */
export async function fenceTransactionalId(settings: ProducerSettings, timeoutMs: number): Promise<void> {
  const producer = new Kafka.Producer(settings.global, settings.topic);
  await new Promise<void>((resolve, reject) => producer.connect({ timeout: timeoutMs }, (err) => (err ? reject(err) : resolve())));
  try {
    await settled((done) => producer.initTransactions(timeoutMs, done));
  } finally {
    await new Promise<void>((resolve) => producer.disconnect(timeoutMs, () => resolve()));
  }
}

/** Why librdkafka takes no more messages in the transaction under way, as an error, or null when it does. */
export function refusalError(refusal: TransactionRefusal | null): Error | null {
  if (refusal === 'fatal') return new Error('librdkafka refused a message with a fatal error');
  if (refusal === 'transaction_failed')
    return new Error('librdkafka refused a message: the transaction failed (a message of it timed out or was refused) and must be aborted');
  return null;
}

export function errorMessage(err: unknown): string {
  const message = (err as { message?: unknown } | null)?.message;
  return typeof message === 'string' ? message : String(err);
}

/** A binding call with a callback of an error or nothing, as a promise. */
function settled(call: (done: (err: Kafka.LibrdKafkaError | null | undefined) => void) => void): Promise<void> {
  return new Promise((resolve, reject) => call((err) => (err ? reject(err) : resolve())));
}
