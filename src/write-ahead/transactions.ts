// DELIVERY=exactly-once: the write-ahead path's records produced in Kafka transactions, one
// transactional producer per slot, the way Kafka Connect's exactly-once source tasks do (KIP-618).
//
//   accept ──▶ journal record (the 202 still means "in the journal") ──▶ add(): produced now when a
//     transaction is open, else kept (a copy) for the next one
//   end ── TRANSACTION_COMMIT_INTERVAL_MS after the transaction's first record, or at
//     TRANSACTION_MAX_POINTS: the slot's position (its last record: segment, index) written to the
//     positions topic in the same transaction, then commitTransaction ──▶ every record it covered is
//     marked done in the journal
//   start ── initTransactions (fences every earlier holder of the slot's transactional.id and aborts
//     its open transaction), the slot's committed position read back (kafka/positions.ts); what the
//     journal holds from before is marked done up to that position and produced again after it,
//     before anything accepted meanwhile
//
// Why nothing is produced twice: a record leaves the journal only once a committed transaction
// covered it, and the transaction that covered it also moved the position past it. A crash between
// the commit and the marks leaves records the position covers: the next holder skips them. A crash
// before the commit leaves an open transaction: initTransactions aborts it, and a read_committed
// consumer never sees its messages.
//
// Why the order matters: the position is one mark per slot, "everything up to here". Records go into
// transactions in journal order, so a committed position never passes a record that is not committed;
// what is accepted while an earlier process's records are produced again waits behind them (`later`).
//
// librdkafka's error classes (rd_kafka_error_is_retriable, _txn_requires_abort, _is_fatal): a
// retriable error retries the call; an abortable one aborts the transaction and produces its records
// again in the next; a fatal one (fenced: another process took the slot's id) ends the worker, whose
// successor starts from the committed position.
import type { ExactlyOnce } from '../config.js';
import type { InFlightRecord, Journal } from '../journal/journal.js';
import type { JournalBatch } from '../journal/record.js';
import { covers, positionMessage, type JournalPosition } from '../kafka/positions.js';
import { isFenced, type ProducedBatch } from '../kafka/producer.js';
import type { Logger } from '../log.js';
import type { WorkerMetrics } from '../metrics/metrics.js';

/** What the transactions need of the producer (kafka/producer.ts). */
export interface TransactionalProducer {
  initTransactions(timeoutMs: number): Promise<void>;
  beginTransaction(): Promise<void>;
  commitTransaction(timeoutMs: number): Promise<void>;
  abortTransaction(timeoutMs: number): Promise<void>;
  /** Hands the messages of a batch from the `from`-th on to librdkafka; returns how many of those it took. */
  produceRest(batch: ProducedBatch, from: number, timestamp: number): number;
  /** Hands messages to librdkafka for another topic; whether it took them all. */
  produceTo(topic: string, batch: ProducedBatch): boolean;
  /** librdkafka refused a message with its fatal error (the next transaction call returns it). */
  readonly failedFatally: boolean;
  /** librdkafka refused a message because the transaction failed: it takes none until it is aborted. */
  readonly transactionFailed: boolean;
  /** Acknowledgements counted per tag: read and dropped here (the commit says what Kafka has). */
  takeAcks(): Uint32Array | undefined;
}

/** librdkafka's error, as the binding passes it, with its class. */
interface ClassifiedError {
  message?: string;
  code?: number;
  isFatal?: boolean;
  isRetriable?: boolean;
  isTxnRequiresAbort?: boolean;
}

/**
 * A journal record on its way. Its messages: null for a record of this process, taken from the
 * journal when it is produced (a view of the mapped segment, or read back from the file); a copy
 * only where the journal is not mapped (JOURNAL_SYNC=disk) and the record waits for a transaction
 * (the request's buffers are reused by the next request); the record an earlier process left, as
 * read back. Copying every request measured 1.13 × the CPU per point of the default mode (its
 * garbage reached the old generation).
 */
interface Entry {
  readonly record: InFlightRecord;
  batch: JournalBatch | null;
  /** The record's messages (batch may be null). */
  readonly count: number;
  readonly timestamp: number;
  /** Messages librdkafka took so far in the current transaction. */
  produced: number;
}

type State = 'starting' | 'idle' | 'beginning' | 'open' | 'ending' | 'failed' | 'stopped';

/** initTransactions tries this often before the start gives up (each within TRANSACTION_TIMEOUT_MS). */
const INIT_ATTEMPTS = 3;
/** A retriable error: the call again after this. */
const RETRY_DELAY_MS = 100;
/** Records read back from the journal per pass while recovering, at most. */
const RECOVERED_PER_PASS = 256;

export interface TransactionsOptions {
  journal: Journal;
  /** The journal directory's identity (journal/journal-id.ts): positions count in it. */
  journalId: string;
  producer: TransactionalProducer;
  settings: ExactlyOnce;
  /** The position key (the transactional.id) of a slot. */
  keyOf: (slot: number) => string;
  log: Logger;
  metrics: WorkerMetrics;
  /**
   * A fatal error: the worker ends, its successor starts from the committed position; `fenced` when
   * another process took the slot's transactional.id.
   */
  onFatal: (fenced: boolean) => void;
}

export class Transactions {
  private state: State = 'starting';
  /** In the open (or ending) transaction, in journal order. */
  private open: Entry[] = [];
  /** For the next transaction, in journal order. */
  private waiting: Entry[] = [];
  /** Accepted while an earlier process's records are produced again: after all of them. */
  private later: Entry[] = [];
  private openPoints = 0;
  private waitingPoints = 0;
  private laterPoints = 0;
  private endTimer: NodeJS.Timeout | null = null;
  /** When the current (or last) transaction began, performance.now(). */
  private openedAt = 0;
  /** Each slot's committed position, as read at the start and moved by every commit. */
  private readonly committed = new Map<number, JournalPosition>();
  private readonly journal: Journal;
  private readonly producer: TransactionalProducer;
  private readonly settings: ExactlyOnce;
  private readonly log: Logger;
  private readonly metrics: WorkerMetrics;
  /** Resolved whenever a transaction ends, for drain(). */
  private ended: (() => void)[] = [];

  constructor(private readonly opts: TransactionsOptions) {
    this.journal = opts.journal;
    this.producer = opts.producer;
    this.settings = opts.settings;
    this.log = opts.log;
    this.metrics = opts.metrics;
  }

  /** Points of records an earlier process left that a committed position already covered: done without being produced again. */
  alreadyCommittedPoints = 0;

  /** Points held in memory, not yet in librdkafka's queue: admission counts them. */
  get heldPoints(): number {
    return this.waitingPoints + this.laterPoints;
  }

  /** Whether drain() ran: a method, so that a check after an await is not narrowed away by the one before it. */
  private drained(): boolean {
    return this.state === 'stopped';
  }

  /** Whether the slot's transactions are initialized and its position read: records are produced. */
  get ready(): boolean {
    return this.state !== 'starting' && this.state !== 'failed' && this.state !== 'stopped';
  }

  /**
   * Fences the slot's earlier holders and reads the committed positions of every slot this journal
   * holds. Throws what stops the start: initTransactions refused INIT_ATTEMPTS times (a broker without
   * transactions), the positions topic missing or unreadable. Drained meanwhile (a shutdown during
   * the start), it returns as soon as the call under way does, the slot not ready.
   */
  async start(slots: readonly number[], readPositions: (keys: string[]) => Promise<Map<string, JournalPosition>>): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await this.producer.initTransactions(this.settings.transactionTimeoutMs);
        break;
      } catch (err) {
        const e = err as ClassifiedError;
        if (this.drained()) return;
        if (e.isFatal === true || attempt >= INIT_ATTEMPTS) {
          throw new Error(
            `cannot initialize Kafka transactions for ${this.opts.keyOf(slots[0] ?? 0)} (${e.message ?? String(err)}): DELIVERY=exactly-once needs brokers with transactions, whose transaction.state.log.replication.factor and transaction.state.log.min.isr the cluster can meet (1 on a single broker)`,
            { cause: err },
          );
        }
        this.log.warn({ err, attempt }, 'initTransactions failed; trying again');
      }
    }
    if (this.drained()) return;
    const keys = slots.map((slot) => this.opts.keyOf(slot));
    const found = await readPositions(keys);
    if (this.drained()) return;
    slots.forEach((slot, i) => {
      const position = found.get(keys[i]!);
      if (position === undefined) return;
      if (position.journal !== this.opts.journalId) {
        this.log.warn({ slot, position, journal: this.opts.journalId }, 'the committed position of this slot counts in another journal directory (a new volume?): ignored, every record this journal holds is produced');
        return;
      }
      this.committed.set(slot, position);
    });
    this.log.info({ slots, positions: Object.fromEntries(this.committed) }, 'Kafka transactions initialized; earlier holders of these slots are fenced');
    this.state = 'idle';
    this.pass();
  }

  /**
   * A record just appended to the journal, with the request's messages (buffers the next request
   * reuses): produced at once when a transaction is open, else kept for the next one (Entry says how).
   * Called only once start() is done: admission refuses points before.
   */
  add(record: InFlightRecord, batch: JournalBatch, timestamp: number): void {
    const waits = this.journal.recovering || this.later.length > 0;
    if (!waits && this.state === 'open') {
      // The common case: produced now from the request's own buffers, nothing of them kept.
      const entry: Entry = { record, batch, count: batch.count, timestamp, produced: 0 };
      this.produceEntry(entry);
      entry.batch = entry.produced === entry.count || record.segment.map !== null ? null : copyOf(batch);
      this.joinOpen(entry);
      return;
    }
    const entry: Entry = { record, batch: record.segment.map !== null ? null : copyOf(batch), count: batch.count, timestamp, produced: 0 };
    if (waits) {
      this.later.push(entry);
      this.laterPoints += entry.count;
      return;
    }
    this.enqueue(entry);
  }

  private enqueue(entry: Entry): void {
    if (this.state === 'open') {
      this.produceEntry(entry);
      this.joinOpen(entry);
      return;
    }
    this.waiting.push(entry);
    this.waitingPoints += entry.count;
    if (this.state === 'idle') void this.begin();
  }

  private joinOpen(entry: Entry): void {
    this.open.push(entry);
    this.openPoints += entry.count;
    if (this.openPoints >= this.settings.maxPoints) void this.end();
  }

  /** Every poll: acknowledgements dropped, what librdkafka refused offered again, the journal's earlier records fed in. */
  pass(): void {
    this.producer.takeAcks();
    if (!this.ready) return;
    if (this.state === 'open') for (const entry of this.open) if (entry.produced < entry.count) this.produceEntry(entry);
    this.recover();
  }

  /** Records an earlier process left: marked done when the committed position covers them, else produced again in order. */
  private recover(): void {
    if (this.state === 'starting') return;
    for (let n = 0; n < RECOVERED_PER_PASS && this.journal.recovering && this.waitingPoints + this.openPoints < this.settings.maxPoints; n++) {
      let next;
      try {
        next = this.journal.nextRecovered(1)[0];
      } catch {
        return; // a segment that cannot be read: the journal failed, and the worker restarts
      }
      if (next === undefined) break;
      const { record, inFlight } = next;
      const position = this.committed.get(inFlight.segment.slot);
      if (position !== undefined && inFlight.segment.seq >= 0 && covers(position, inFlight.segment.seq, inFlight.index)) {
        this.journal.acknowledged(inFlight.id, inFlight.points);
        this.metrics.recoveredCommitted.inc();
        this.alreadyCommittedPoints += inFlight.points;
        continue;
      }
      this.enqueue({ record: inFlight, batch: record, count: record.count, timestamp: record.timestamp, produced: 0 });
    }
    this.journal.flushMarks();
    if (!this.journal.recovering && this.later.length > 0) {
      const later = this.later;
      this.later = [];
      this.laterPoints = 0;
      for (const entry of later) this.enqueue(entry);
    }
  }

  /** Produces what librdkafka has not taken of an entry (its messages from the journal if it has none). */
  private produceEntry(entry: Entry): void {
    let batch = entry.batch ?? this.journal.view(entry.record);
    if (batch === null) {
      try {
        batch = entry.batch = this.journal.readBack(entry.record);
      } catch (err) {
        this.fatal('cannot read a record back from the journal to produce it again', err);
        return;
      }
    }
    entry.produced += this.producer.produceRest(batch, entry.produced, entry.timestamp);
    // The transaction failed while producing: aborted now (fenced: the abort returns the fatal error,
    // and fatal() ends the worker). Waiting for librdkafka to take the rest would wait for ever.
    const refused = this.refusedBy();
    if (refused !== null && this.state === 'open') {
      this.state = 'ending';
      void this.abort(refused);
    }
  }

  /** Why librdkafka takes no more messages in this transaction, or null when it does. */
  private refusedBy(): Error | null {
    if (this.producer.failedFatally) return new Error('librdkafka refused a message with a fatal error');
    if (this.producer.transactionFailed) return new Error('librdkafka refused a message: the transaction failed (a message of it timed out or was refused) and must be aborted');
    return null;
  }

  private async begin(): Promise<void> {
    this.state = 'beginning';
    try {
      await this.producer.beginTransaction();
    } catch (err) {
      this.fatal('beginTransaction failed', err);
      return;
    }
    if (this.state !== 'beginning') return;
    this.state = 'open';
    this.openedAt = performance.now();
    this.restatePositions();
    const waiting = this.waiting;
    this.waiting = [];
    this.waitingPoints = 0;
    for (const entry of waiting) {
      this.produceEntry(entry);
      this.open.push(entry);
      this.openPoints += entry.count;
    }
    if (this.openPoints >= this.settings.maxPoints) void this.end();
    else this.endTimer = setTimeout(() => void this.end(), this.settings.commitIntervalMs);
  }

  /**
   * Each committed position written again, unchanged, as a transaction opens. librdkafka joins a
   * partition to the transaction (AddPartitionsToTxn) when a message first goes to it, and holds the
   * message until the coordinator answers: written only at the end, a position cost every commit
   * that round trip. Now its partition joins with the points' ones; the position written at the end
   * comes after this one, and the newest position of a key is the one read back. Best effort: what
   * librdkafka refuses here it refuses again at the end, which aborts the transaction.
   */
  private restatePositions(): void {
    try {
      for (const [slot, position] of this.committed) this.producePosition(slot, position);
    } catch {
      // the end says it
    }
  }

  /** A slot's position to the positions topic, in the open transaction; whether librdkafka took it. */
  private producePosition(slot: number, position: JournalPosition): boolean {
    return this.producer.produceTo(this.settings.positionsTopic, positionMessage(this.opts.keyOf(slot), position));
  }

  /** Positions, then the commit; once committed, every record of the transaction is done. */
  private async end(): Promise<void> {
    if (this.state !== 'open') return;
    this.state = 'ending';
    const endedAt = performance.now();
    if (this.endTimer !== null) clearTimeout(this.endTimer);
    this.endTimer = null;
    // Every message in librdkafka's queue first (a queue that was full refused some): the commit
    // covers what was produced. A transaction that fails meanwhile is aborted (a fatal error: abort()
    // ends the worker).
    while (this.open.some((e) => e.produced < e.count)) {
      const refused = this.refusedBy();
      if (refused !== null) {
        await this.abort(refused);
        return;
      }
      for (const entry of this.open) if (entry.produced < entry.count && this.state === 'ending') this.produceEntry(entry);
      if (this.state !== 'ending') return; // failed meanwhile
      if (this.open.some((e) => e.produced < e.count)) await sleep(RETRY_DELAY_MS);
    }
    const positions = this.positionsOf(this.open);
    try {
      for (const [slot, position] of positions) {
        if (!this.producePosition(slot, position)) {
          throw new Error(`librdkafka's queue did not take the position of slot ${slot} (queue.buffering.max.messages or .kbytes reached)`);
        }
      }
    } catch (err) {
      // A position not queued: committed without it, the transaction's records would be produced
      // again by the slot's next holder after a crash before their marks. Aborted, they go again in the next.
      await this.abort(err);
      return;
    }
    const failed = await this.retried('commitTransaction', () => this.producer.commitTransaction(this.settings.transactionTimeoutMs));
    if (failed === null) {
      this.metrics.transactionCommit.observe((performance.now() - endedAt) / 1000);
      this.committedAll(positions);
    } else if (failed.isTxnRequiresAbort === true && failed.isFatal !== true) await this.abort(failed);
    else this.fatal('commitTransaction failed', failed);
  }

  /** A transaction call, tried again while librdkafka calls its error retriable; the error that ended it, or null. */
  private async retried(what: string, call: () => Promise<void>): Promise<ClassifiedError | null> {
    for (;;) {
      try {
        await call();
        return null;
      } catch (err) {
        const e = err as ClassifiedError;
        if (e.isRetriable !== true || e.isFatal === true) return e;
        this.log.warn({ err }, `${what} failed and may be retried; retrying`);
        await sleep(RETRY_DELAY_MS);
      }
    }
  }

  /** The last record of each slot in the transaction (earlier versions' spill files have none). */
  private positionsOf(entries: readonly Entry[]): Map<number, JournalPosition> {
    const out = new Map<number, JournalPosition>();
    for (const { record } of entries) {
      if (record.segment.seq < 0) continue;
      out.set(record.segment.slot, { journal: this.opts.journalId, slot: record.segment.slot, seq: record.segment.seq, index: record.index });
    }
    return out;
  }

  private committedAll(positions: Map<number, JournalPosition>): void {
    const now = performance.now();
    for (const { record } of this.open) {
      const done = this.journal.acknowledged(record.id, record.remaining);
      if (done !== null) this.metrics.deliveryLatency.observe((now - done.producedAt) / 1000);
    }
    this.journal.flushMarks();
    for (const [slot, position] of positions) this.committed.set(slot, position);
    this.metrics.delivered.inc(this.openPoints);
    this.metrics.transactions.labels('committed').inc();
    this.open = [];
    this.openPoints = 0;
    this.next();
  }

  /** An abortable error: the transaction aborted, its records first in the next one. */
  private async abort(cause: unknown): Promise<void> {
    this.log.warn({ err: cause, records: this.open.length, points: this.openPoints }, 'Kafka transaction aborted; its records are produced again in the next one');
    const failed = await this.retried('abortTransaction', () => this.producer.abortTransaction(this.settings.transactionTimeoutMs));
    if (failed !== null) {
      this.fatal('abortTransaction failed', failed);
      return;
    }
    this.metrics.transactions.labels('aborted').inc();
    for (const entry of this.open) {
      entry.produced = 0;
      // A copy of this process's record is let go: read back from the journal when produced again.
      if (entry.record.at >= 0) entry.batch = null;
    }
    this.waiting = [...this.open, ...this.waiting];
    this.waitingPoints += this.openPoints;
    this.open = [];
    this.openPoints = 0;
    this.next();
  }

  private next(): void {
    if (this.state === 'failed' || this.state === 'stopped') return;
    this.state = 'idle';
    for (const done of this.ended.splice(0)) done();
    if (this.waiting.length > 0) void this.begin();
  }

  private fatal(what: string, err: unknown): void {
    if (this.state === 'failed') return;
    this.state = 'failed';
    if (this.endTimer !== null) clearTimeout(this.endTimer);
    for (const done of this.ended.splice(0)) done();
    const e = err as ClassifiedError;
    const fenced = isFenced(e) && !this.timedOut();
    const why = `${what}: ${e.message ?? String(err)}${fenced ? ' (fenced: another process took this slot\'s transactional.id)' : isFenced(e) ? ' (the transaction outlived TRANSACTION_TIMEOUT_MS: the broker aborted it and fenced this producer)' : ''}`;
    this.log.fatal({ err }, `${why}; the worker ends, and the slot's next holder produces again from the committed position what the journal holds`);
    this.opts.onFatal(fenced);
  }

  /**
   * Whether the transaction under way began more than TRANSACTION_TIMEOUT_MS ago: the broker aborts
   * such a transaction and fences its producer (a worker frozen, or starved of CPU). A fence that
   * comes sooner than that came from another process with the same transactional.id.
   */
  timedOut(): boolean {
    return this.state !== 'idle' && this.openedAt > 0 && performance.now() - this.openedAt >= this.settings.transactionTimeoutMs;
  }

  /**
   * Shutdown: commits what is open and what waits, until `deadline`; what is left stays in the
   * journal for the slot's next holder. Returns the points not committed.
   */
  async drain(deadline: number): Promise<number> {
    while (this.ready && (this.state !== 'idle' || this.waiting.length > 0) && Date.now() < deadline) {
      if (this.state === 'open') void this.end();
      await Promise.race([new Promise<void>((resolve) => this.ended.push(resolve)), sleep(Math.max(1, deadline - Date.now()))]);
    }
    if (this.state !== 'failed') this.state = 'stopped';
    if (this.endTimer !== null) clearTimeout(this.endTimer);
    return this.journal.pendingPoints;
  }
}

/** A batch copied out of the request's buffers, which the next request reuses. */
function copyOf(batch: JournalBatch): JournalBatch {
  return { count: batch.count, data: Buffer.from(batch.data), messages: batch.messages.slice() };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
