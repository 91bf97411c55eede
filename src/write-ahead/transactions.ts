// DELIVERY=exactly-once: the journal's records produced in Kafka transactions, one transactional
// producer per slot, as Kafka Connect's exactly-once source tasks do (KIP-618).
//
//   start ── initTransactions (fences earlier holders of the slot's transactional.id, aborts their open
//     transaction), the committed positions read (kafka/positions.ts)
//   add ── a record appended: produced now when a transaction is open, else kept for the next one
//   end ── after TRANSACTION_COMMIT_INTERVAL_MS or at TRANSACTION_MAX_POINTS: the slot's position (its
//     last record) written in the same transaction, committed, every record it covered marked done
//   recover ── what an earlier process left: done up to the committed position, produced again after
//     it, before anything accepted meanwhile (`later`)
//
// Nothing is produced twice: a record leaves the journal only once a committed transaction covered
// it, and that transaction moved the position past it. A crash after the commit and before the marks
// leaves records the position covers: the next holder skips them. A crash before the commit leaves
// an open transaction, which the next initTransactions aborts. Records go into transactions in journal
// order, so a committed position never passes a record that is not committed.
// Errors by class (kafka/transactional-producer.ts): retriable, the call again; abortable, abort and
// produce the records in the next transaction; fatal (a fence), the worker ends.
import type { ExactlyOnce } from '../config.js';
import type { Journal } from '../journal/journal.js';
import type { JournalBatch } from '../journal/record.js';
import type { JournalPosition } from '../kafka/positions.js';
import { errorMessage, isFenced, refusalError, transactionErrorClass, type TransactionalProducer } from '../kafka/transactional-producer.js';
import type { Logger } from '../log.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import type { InFlightRecord, Ledger } from './ledger.js';
import { readRecovered } from './replay.js';
import { SlotPositions } from './slot-positions.js';
import { copyOf, Entries, type Entry } from './transaction-entries.js';

type State = 'starting' | 'idle' | 'beginning' | 'open' | 'ending' | 'failed' | 'stopped';

/** initTransactions tries this often before the start gives up (each within TRANSACTION_TIMEOUT_MS). */
const INIT_ATTEMPTS = 3;
/** A retriable error: the call again after this. */
const RETRY_DELAY_MS = 100;

export interface TransactionsOptions {
  /** The journal's records in flight, and the journal (ledger.journal). */
  ledger: Ledger;
  /** The journal directory's identity (journal/journal-id.ts): positions count in it. */
  journalId: string;
  producer: TransactionalProducer;
  settings: ExactlyOnce;
  /** The position key (the transactional.id) of a slot. */
  keyOf: (slot: number) => string;
  log: Logger;
  metrics: WorkerMetrics;
  /** A fatal error: the worker ends, its successor starts from the committed position; `fenced`: another process took the slot's id. */
  onFatal: (fenced: boolean) => void;
}

export class Transactions {
  private state: State = 'starting';
  /** In the open (or ending) transaction. */
  private readonly open = new Entries();
  /** For the next transaction. */
  private readonly waiting = new Entries();
  /** Accepted while an earlier process's records are produced again: after all of them. */
  private readonly later = new Entries();
  private endTimer: NodeJS.Timeout | null = null;
  /** When the current (or last) transaction began, performance.now(). */
  private openedAt = 0;
  private readonly positions: SlotPositions;
  private readonly journal: Journal;
  private readonly ledger: Ledger;
  private readonly producer: TransactionalProducer;
  private readonly settings: ExactlyOnce;
  private readonly log: Logger;
  private readonly metrics: WorkerMetrics;
  /** Resolved whenever a transaction ends, for drain(). */
  private ended: (() => void)[] = [];

  constructor(private readonly opts: TransactionsOptions) {
    this.ledger = opts.ledger;
    this.journal = opts.ledger.journal;
    this.producer = opts.producer;
    this.settings = opts.settings;
    this.log = opts.log;
    this.metrics = opts.metrics;
    this.positions = new SlotPositions({
      journalId: opts.journalId,
      positionsTopic: opts.settings.positionsTopic,
      keyOf: opts.keyOf,
      produceTo: (topic, batch) => opts.producer.produceTo(topic, batch),
      log: opts.log,
    });
  }

  private committedBefore = 0;

  /** Points of records an earlier process left that a committed position already covered: done without being produced again. */
  get alreadyCommittedPoints(): number {
    return this.committedBefore;
  }

  /** Points held in memory, not yet in librdkafka's queue: admission counts them. */
  get heldPoints(): number {
    return this.waiting.points + this.later.points;
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
        if (this.drained()) return;
        if (transactionErrorClass(err) === 'fatal' || attempt >= INIT_ATTEMPTS) {
          throw new Error(
            `cannot initialize Kafka transactions for ${this.opts.keyOf(slots[0] ?? 0)} (${errorMessage(err)}): DELIVERY=exactly-once needs brokers with transactions, whose transaction.state.log.replication.factor and transaction.state.log.min.isr the cluster can meet (1 on a single broker)`,
            { cause: err },
          );
        }
        this.log.warn({ err, attempt }, 'initTransactions failed; trying again');
      }
    }
    if (this.drained()) return;
    const found = await readPositions(this.positions.keys(slots));
    if (this.drained()) return;
    this.positions.adopt(slots, found);
    this.log.info({ slots, positions: this.positions.all }, 'Kafka transactions initialized; earlier holders of these slots are fenced');
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
    if (this.state === 'idle') void this.begin();
  }

  private joinOpen(entry: Entry): void {
    this.open.push(entry);
    if (this.open.points >= this.settings.maxPoints) void this.end();
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
    readRecovered(
      this.ledger,
      () => this.waiting.points + this.open.points < this.settings.maxPoints,
      ({ record, inFlight }) => {
        if (this.positions.covers(inFlight)) {
          this.ledger.acknowledged(inFlight.id, inFlight.points);
          this.metrics.recoveredCommitted.inc();
          this.committedBefore += inFlight.points;
          return;
        }
        this.enqueue({ record: inFlight, batch: record, count: record.count, timestamp: record.timestamp, produced: 0 });
      },
    );
    this.journal.flushMarks();
    if (!this.journal.recovering && this.later.length > 0) {
      for (const entry of this.later.takeAll()) this.enqueue(entry);
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
    const refused = refusalError(this.producer.refusal());
    if (refused !== null && this.state === 'open') {
      this.state = 'ending';
      void this.abort(refused);
    }
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
    this.positions.restate();
    for (const entry of this.waiting.takeAll()) {
      this.produceEntry(entry);
      this.open.push(entry);
    }
    if (this.open.points >= this.settings.maxPoints) void this.end();
    else this.endTimer = setTimeout(() => void this.end(), this.settings.commitIntervalMs);
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
    while (this.open.someUnproduced()) {
      const refused = refusalError(this.producer.refusal());
      if (refused !== null) {
        await this.abort(refused);
        return;
      }
      for (const entry of this.open) if (entry.produced < entry.count && this.state === 'ending') this.produceEntry(entry);
      if (this.state !== 'ending') return; // failed meanwhile
      if (this.open.someUnproduced()) await sleep(RETRY_DELAY_MS);
    }
    const positions = this.positions.of(this.open);
    try {
      this.positions.write(positions);
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
    } else if (transactionErrorClass(failed) === 'abortable') await this.abort(failed);
    else this.fatal('commitTransaction failed', failed);
  }

  /** A transaction call, tried again while librdkafka calls its error retriable; the error that ended it, or null. */
  private async retried(what: string, call: () => Promise<void>): Promise<unknown> {
    for (;;) {
      try {
        await call();
        return null;
      } catch (err) {
        if (transactionErrorClass(err) !== 'retriable') return err;
        this.log.warn({ err }, `${what} failed and may be retried; retrying`);
        await sleep(RETRY_DELAY_MS);
      }
    }
  }

  private committedAll(positions: Map<number, JournalPosition>): void {
    const now = performance.now();
    for (const { record } of this.open) {
      const done = this.ledger.acknowledged(record.id, record.remaining);
      if (done !== null) this.metrics.deliveryLatency.observe((now - done.producedAt) / 1000);
    }
    this.journal.flushMarks();
    this.positions.moved(positions);
    this.metrics.delivered.inc(this.open.points);
    this.metrics.transactions.labels('committed').inc();
    this.open.takeAll();
    this.next();
  }

  /** An abortable error: the transaction aborted, its records first in the next one. */
  private async abort(cause: unknown): Promise<void> {
    this.log.warn(
      { err: cause, records: this.open.length, points: this.open.points },
      'Kafka transaction aborted; its records are produced again in the next one',
    );
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
    this.waiting.putFirst(this.open.takeAll());
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
    const fenced = isFenced(err) && !this.timedOut();
    const why = `${what}: ${errorMessage(err)}${fenced ? " (fenced: another process took this slot's transactional.id)" : isFenced(err) ? ' (the transaction outlived TRANSACTION_TIMEOUT_MS: the broker aborted it and fenced this producer)' : ''}`;
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
      // Looked at again soon: a transaction that was beginning is open by then, and is ended.
      await Promise.race([new Promise<void>((resolve) => this.ended.push(resolve)), sleep(Math.max(1, Math.min(RETRY_DELAY_MS, deadline - Date.now())))]);
    }
    if (this.state !== 'failed') this.state = 'stopped';
    if (this.endTimer !== null) clearTimeout(this.endTimer);
    return this.ledger.pendingPoints;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
