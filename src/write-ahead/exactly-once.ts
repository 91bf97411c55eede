// DELIVERY=exactly-once: every point of a request is in the journal before its 202, as at least once,
// and reaches Kafka in a transaction that also moves the slot's committed position past it.
//
//   start ── startTransactions: earlier holders of the slot fenced, the committed positions read
//     (process/slot-transactions.ts); nothing is taken before
//   accept ──▶ journal.append ──▶ transactions.add (transactions.ts): produced in the open
//     transaction, or kept for the next one
//   commit ── every poll runs the transactions: a transaction ends after TRANSACTION_COMMIT_INTERVAL_MS
//     or TRANSACTION_MAX_POINTS, its records marked done once committed
//   recovery ── what an earlier process left: skipped up to the committed position, produced again
//     after it (transactions.ts, with replay.ts's readRecovered)
//   drain ── what is open and waiting committed until the deadline; the rest stays in the journal
import type { ProducerRefusal } from '../api/errors.js';
import { transactionalId } from '../config.js';
import type { Journal } from '../journal/journal.js';
import type { JournalPosition } from '../kafka/positions.js';
import type { KafkaProducer } from '../kafka/producer.js';
import { Throttled } from '../log.js';
import type { EncodedPoints } from '../track-point/encode.js';
import type { DeliverySink, Pending, Refusal, SinkOptions } from './acceptance.js';
import { Admission, afterCommit, appendRecord, exportFigures } from './admission.js';
import { EveryPoll, whenEmptied } from './every-poll.js';
import { Ledger } from './ledger.js';
import { Transactions } from './transactions.js';

const NOTHING_REPLAYED = { retried: 0, recovered: 0, possibleDuplicates: 0 };

export class ExactlyOnceSink implements DeliverySink {
  private readonly journal: Journal;
  private readonly ledger: Ledger;
  private readonly producer: KafkaProducer;
  private readonly transactions: Transactions;
  private readonly admit: Admission;
  private readonly poll: EveryPoll;
  private readonly journalErrors: Throttled;
  /** JOURNAL_SYNC=disk: as at least once, the answer waits for the group commit after its record. */
  private readonly afterCommit: Pending | null;

  /** `journalId`: the journal directory's identity (journal/journal-id.ts): positions count in it. */
  constructor(opts: SinkOptions, journalId: string) {
    const { config, log, metrics, journal, events } = opts;
    const exactlyOnce = config.exactlyOnce;
    if (exactlyOnce === null) throw new Error('ExactlyOnceSink needs DELIVERY=exactly-once');
    this.journal = journal;
    this.ledger = new Ledger(journal);
    this.producer = opts.producer({
      // In a transaction a failed message fails the commit, which aborts and produces the whole transaction again.
      onFailed: () => undefined,
      onAccepting: () => {
        if (this.transactions.ready && !this.emptied) this.poll.follow();
      },
      // A fence after a transaction outlived its timeout is the broker's, not another process's.
      onFatal: (fenced) => events.onFatal(fenced && !this.transactions.timedOut()),
    });
    const calls = this.producer.transactions;
    if (calls === null) throw new Error('DELIVERY=exactly-once needs a producer with a transactional.id');
    this.transactions = new Transactions({
      ledger: this.ledger,
      journalId,
      producer: calls,
      settings: exactlyOnce,
      keyOf: (slot) => transactionalId(exactlyOnce, slot),
      log,
      metrics,
      onFatal: (fenced) => events.onFatal(fenced),
    });
    this.poll = new EveryPoll(() => {
      this.transactions.pass();
      return !this.emptied;
    });
    this.admit = new Admission({
      journal,
      journaled: true,
      producer: this.producer,
      maxPoints: config.queueMaxPoints,
      held: () => this.transactions.heldPoints,
      modeUnready: () =>
        this.transactions.ready
          ? null
          : "DELIVERY=exactly-once: the slot's Kafka transactions are not initialized (starting), or failed (the worker is being replaced)",
    });
    this.journalErrors = new Throttled(log, 'error', 'cannot write the journal: POST /track answers 500 journal_full until it can');
    this.afterCommit = afterCommit(config.journalSync, journal);
    exportFigures(metrics, this.producer, this.ledger, () => NOTHING_REPLAYED);
  }

  /** Connects in the background; nothing is produced before startTransactions. */
  start(): void {
    this.producer.start();
  }

  /**
   * Fences the slot's earlier holders, reads the committed positions, and starts producing what the
   * journal holds. Throws what stops the start (kafka/positions.ts, transactions.ts).
   */
  async startTransactions(slots: readonly number[], readPositions: (keys: string[]) => Promise<Map<string, JournalPosition>>): Promise<void> {
    await this.transactions.start(slots, readPositions);
    if (this.transactions.ready) this.poll.follow();
  }

  /** Points of records an earlier process left that a committed position already covered. */
  get alreadyCommittedPoints(): number {
    return this.transactions.alreadyCommittedPoints;
  }

  admission(): ProducerRefusal | null {
    return this.admit.beforeBody();
  }

  accept(batch: EncodedPoints): Refusal | Pending | null {
    const refusal = this.admit.forBatch(batch);
    if (refusal !== null) return refusal;
    const timestamp = Date.now();
    const record = appendRecord(this.ledger, batch, timestamp, this.journalErrors);
    if (typeof record === 'string') return record;
    this.transactions.add(record, batch, timestamp);
    this.poll.follow();
    return this.afterCommit;
  }

  readiness(): { ready: boolean; reason: string } {
    return this.admit.readiness();
  }

  whenAccepting(timeoutMs: number): Promise<boolean> {
    return this.producer.whenAccepting(timeoutMs);
  }

  /** Whether the journal holds nothing that a committed transaction has not covered. */
  get emptied(): boolean {
    return this.journal.records === 0 && !this.journal.recovering;
  }

  get pointsLeft(): number {
    return this.ledger.pointsLeft;
  }

  whenEmptied(deadline: number): Promise<boolean> {
    return whenEmptied(() => this.emptied, this.journal, this.producer, deadline);
  }

  /** Commits what is open and what waits until the deadline; what is left stays in the journal for the slot's next holder. */
  async drain(timeoutMs: number): Promise<number> {
    const deadline = Date.now() + timeoutMs;
    const left = await this.transactions.drain(deadline);
    this.poll.stop();
    await this.producer.disconnect(deadline - Date.now());
    return left;
  }
}
