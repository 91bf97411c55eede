// The write-ahead path of one worker: what happens to a request's points from the moment they are
// taken until Kafka has them, top to bottom. The HTTP edge asks it one question (acceptance.ts); the
// journal (journal/) keeps files and the producer (kafka/) talks to Kafka, and neither knows the other.
//
//   accept ──▶ journal.append: a record, in the OS before the answer ──▶ producer.produce, tagged
//     │        with the record's id (what librdkafka refuses midway waits in replay)
//     └─ answer: at once (JOURNAL_SYNC=process), or once the record is on the disk (JOURNAL_SYNC=disk:
//        a Pending, answered by the journal's group commit)
//   acknowledge ── every poll while records are in flight: Kafka's acknowledgements per record
//     (producer.takeAcks) ──▶ journal.acknowledged ──▶ a record done is marked (journal.flushMarks),
//     a segment all done is deleted
//   replay ── what failed after its 202, and what an earlier process left (replay.ts), produced again
//     under its record's id with its acceptance time
//
//   DELIVERY=exactly-once: records are produced in Kafka transactions instead, each slot's position
//   committed with them, and marked done once committed, not once acknowledged (transactions.ts)
//
//   ACK_MODE=delivered: new requests skip the journal, and the answer waits for Kafka (a Pending
//   settled by the producer's per-message reports); what an earlier process left is replayed all the same.
//   The journal fails (a disk error: journal.ts): nothing more is taken (journal_failed), readiness
//   falls, and the worker, told by the journal, restarts to recover from what the disk holds.
import type { ProducerRefusal } from '../api/errors.js';
import { transactionalId, type Config } from '../config.js';
import type { Journal } from '../journal/journal.js';
import { recordBytes } from '../journal/record.js';
import { POLL_INTERVAL_MS } from '../kafka/broker-link.js';
import { newTicket, type DeliveryTicket } from '../kafka/delivery-reports.js';
import type { KafkaProducer } from '../kafka/producer.js';
import { Throttled, type Logger } from '../log.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import type { EncodedPoints } from '../track-point/encode.js';
import type { LateFailure, Pending, PointSink, Refusal } from './acceptance.js';
import { Replay } from './replay.js';
import { Transactions } from './transactions.js';

/** Room a worker keeps in the journal to call itself ready: one request of 100 points, about. */
const JOURNAL_HEADROOM = 16 * 1024;

export class WriteAhead implements PointSink {
  private readonly delivered: boolean;
  private readonly maxPoints: number;
  private readonly replay: Replay;
  private readonly journalErrors: Throttled;
  /**
   * Room admission asks for before a body is read: one point, or as many as the last request that
   * did not fit, until one fits. Under a closed loop at 100 points per request the queue sits just
   * below its mark; asked for one point, admission let every request through to be parsed, refused,
   * and parsed again from the waiting room, for as long as the queue stayed there (1.2 µs per point
   * more than the build before, wrk at 100 points per request).
   */
  private roomWanted = 1;
  /** Acknowledgements read every poll while records are in flight or left to produce again. */
  private ackTimer: NodeJS.Timeout | null = null;
  /**
   * JOURNAL_SYNC=disk: the answer of every request taken waits for the group commit after its record.
   * One object serves them all: the edge registers its answer at once, before the next request is taken.
   */
  private readonly afterCommit: Pending | null;
  /** DELIVERY=exactly-once: the slot's transactions (transactions.ts); null: at least once. */
  readonly transactions: Transactions | null;

  constructor(
    config: Config,
    log: Logger,
    private readonly metrics: WorkerMetrics,
    private readonly journal: Journal,
    private readonly producer: KafkaProducer,
    /** DELIVERY=exactly-once: the journal directory's identity (journal/journal-id.ts). */
    journalId: string | null = null,
  ) {
    this.delivered = config.ackMode === 'delivered';
    const exactlyOnce = config.exactlyOnce;
    this.transactions =
      exactlyOnce === null || journalId === null
        ? null
        : new Transactions({ journal, journalId, producer, settings: exactlyOnce, keyOf: (slot) => transactionalId(exactlyOnce, slot), log, metrics, onFatal: (fenced) => this.onFatal?.(fenced) });
    this.maxPoints = config.queueMaxPoints;
    this.replay = new Replay(
      journal,
      {
        produce: (batch, tag, timestamp) => producer.produce(batch, tag, timestamp),
        queueLength: () => producer.queuedPoints,
        kafkaAvailable: () => producer.available,
      },
      // Replay takes librdkafka's queue up to half the limit: new requests keep the other half.
      Math.ceil(config.queueMaxPoints / 2),
    );
    this.journalErrors = new Throttled(log, 'error', 'cannot write the journal: POST /track answers 500 journal_full until it can');
    this.afterCommit = config.journalSync === 'disk' && !this.delivered ? { whenAnswerable: (answer) => journal.afterCommit((err) => answer(err === null ? null : commitFailed(err))) } : null;
    const transactions = this.transactions;
    producer.events = {
      // In a transaction a failed message fails the commit, which aborts and produces the whole transaction again.
      onFailed: (message) => (transactions === null ? this.replay.fail(message) : undefined),
      // Kafka takes points again: what waits in the journal gets its turn at the next poll.
      onAccepting: () => {
        if (journal.recovering || this.replay.backlog > 0) this.followAcks();
      },
      // A fence after a transaction outlived its timeout is the broker's, not another process's.
      onFatal: (fenced) => this.onFatal?.(fenced && !(transactions?.timedOut() ?? false)),
    };
    metrics.setQueueSource(() => ({ points: producer.queuedPoints, bytes: producer.queuedBytes }));
    metrics.setJournalSource(() => ({
      bytes: journal.bytes,
      records: journal.records,
      oldestMs: journal.oldestTimestamp,
      damaged: journal.damagedRecords,
      ...this.replay.counts,
    }));
  }

  /** Called once on a fatal producer error: the worker ends so that a fresh one replaces it. */
  onFatal: ((fenced: boolean) => void) | null = null;

  /** Connects in the background; what an earlier process left is produced once Kafka takes points. */
  start(): void {
    this.producer.start();
    if (this.journal.recovering && this.transactions === null) this.followAcks();
  }

  // ---- accept ---------------------------------------------------------------------------------

  /**
   * Why a request would be refused right now, asked before its body is read: under overload the
   * service spends nothing on points it cannot take. No side effect: the waiting room asks it every
   * few milliseconds.
   */
  admission(): ProducerRefusal | null {
    if (!this.delivered && this.journal.failure !== null) return 'journal_failed';
    const refusal = this.producer.refusal ?? this.transactionsRefusal();
    if (refusal !== null) return refusal;
    if (this.producer.queuedPoints + this.held() + this.roomWanted > this.maxPoints) return 'queue_full';
    if (!this.delivered && (!this.journal.writable() || !this.journal.fits(JOURNAL_HEADROOM))) return 'journal_full';
    return null;
  }

  /**
   * Takes every point of one request, or none. The journal first: the record is in the OS before the
   * request is answered, so the 202 stands on it whatever happens to the process next; then one
   * native call hands the request to librdkafka.
   */
  accept(batch: EncodedPoints): Refusal | Pending | null {
    if (!this.delivered && this.journal.failure !== null) return 'journal_failed';
    const refusal = this.producer.refusal ?? this.transactionsRefusal();
    if (refusal !== null) return refusal;
    const count = batch.count;
    // The queue is librdkafka's and what waits to be produced again: both in memory.
    if (this.producer.queuedPoints + this.held() + count > this.maxPoints) {
      this.roomWanted = count;
      return 'queue_full';
    }
    this.roomWanted = 1;
    if (batch.largestValue > this.producer.messageMaxBytes) return 'message_too_large';
    if (this.delivered) return this.acceptDelivered(batch);

    if (!this.journal.fits(recordBytes(batch))) return 'journal_full';
    const timestamp = Date.now();
    let record;
    try {
      record = this.journal.append(batch, timestamp);
    } catch (err) {
      // Failed for good: the journal said so once (onFailure), and the worker restarts.
      if (this.journal.failure !== null) return 'journal_failed';
      this.journalErrors.report({ err });
      return 'journal_full';
    }
    if (this.transactions !== null) {
      this.transactions.add(record, batch, timestamp);
    } else {
      const taken = this.producer.produce(batch, record.id, timestamp);
      if (taken < count) this.replay.keepUnproduced(record.id, batch, taken);
    }
    this.followAcks();
    return this.afterCommit;
  }

  /** Points held in memory besides librdkafka's queue: to be produced again, or waiting for a transaction. */
  private held(): number {
    return this.replay.backlog + (this.transactions?.heldPoints ?? 0);
  }

  /** DELIVERY=exactly-once: nothing is taken before the slot's transactions are initialized, nor after they failed. */
  private transactionsRefusal(): ProducerRefusal | null {
    return this.transactions === null || this.transactions.ready ? null : 'producer_failed';
  }

  /**
   * DELIVERY=exactly-once: fences the slot's earlier holders, reads the committed positions, and
   * starts producing what the journal holds. Throws what stops the start (kafka/positions.ts,
   * transactions.ts).
   */
  async startTransactions(slots: readonly number[], readPositions: Parameters<Transactions['start']>[1]): Promise<void> {
    if (this.transactions === null) return;
    await this.transactions.start(slots, readPositions);
    if (this.transactions.ready) this.followAcks();
  }

  /** ACK_MODE=delivered: no journal; answered once Kafka answered for every point (acks=all), or at the deadline. */
  private acceptDelivered(batch: EncodedPoints): Refusal | Pending {
    const count = batch.count;
    let answer: ((failure: LateFailure | null) => void) | null = null;
    const ticket = newTicket((t) => answer?.(t.failed === 0 ? null : deliveryFailed(t, count)));
    const refused = this.producer.produceWithTicket(batch, ticket);
    if (refused !== null) return refused;
    // Reports come through the poll, after this returns: the answer is registered first.
    return { whenAnswerable: (a) => void (answer = a) };
  }

  // ---- acknowledge and mark done ----------------------------------------------------------------

  /** Reads acknowledgements every poll while records are in flight or left to produce again. */
  private followAcks(): void {
    this.ackTimer ??= setInterval(() => this.takeAcks(), POLL_INTERVAL_MS);
  }

  /**
   * Kafka's acknowledgements since the last poll, counted per record by librdkafka: each record done
   * is marked in the journal (its segment deleted once all its records are), its delivery latency
   * observed. Then what is to be produced again gets its turn.
   */
  private takeAcks(): void {
    if (this.transactions !== null) {
      this.transactions.pass();
      if (this.journal.records === 0 && !this.journal.recovering && this.ackTimer !== null) {
        clearInterval(this.ackTimer);
        this.ackTimer = null;
      }
      return;
    }
    const acks = this.producer.takeAcks();
    if (acks !== undefined) {
      let acknowledged = 0;
      const now = performance.now();
      for (let i = 0; i < acks.length; i += 2) {
        const n = acks[i + 1]!;
        acknowledged += n;
        const done = this.journal.acknowledged(acks[i]!, n);
        if (done !== null) this.metrics.deliveryLatency.observe((now - done.producedAt) / 1000);
      }
      this.metrics.delivered.inc(acknowledged);
      this.replay.acknowledged();
      this.journal.flushMarks();
    }
    // ---- replay ----
    this.replay.pass();
    if (this.journal.records === 0 && !this.journal.recovering && this.replay.backlog === 0 && this.ackTimer !== null) {
      clearInterval(this.ackTimer);
      this.ackTimer = null;
    }
  }

  // ---- readiness and shutdown -------------------------------------------------------------------

  /** /readyz: a journal that failed (the worker is being restarted), what Kafka allows, then whether the journal takes records. */
  readiness(): { ready: boolean; reason: string } {
    const failure = this.journal.failure;
    if (failure !== null) return { ready: false, reason: `the journal failed (${failure.message}): this worker takes no points and is being restarted` };
    const unready = this.producer.unreadyReason();
    if (unready !== null) return { ready: false, reason: unready };
    if (this.transactions !== null && !this.transactions.ready) return { ready: false, reason: 'DELIVERY=exactly-once: the slot\'s Kafka transactions are not initialized (starting), or failed (the worker is being replaced)' };
    if (!this.journal.writable()) return { ready: false, reason: this.journal.noRoom?.message ?? 'the journal cannot be written' };
    if (!this.delivered && !this.journal.fits(JOURNAL_HEADROOM)) {
      return { ready: false, reason: `journal full: ${this.journal.bytes} of ${this.journal.capacity} bytes (JOURNAL_MAX_BYTES) hold points Kafka has not acknowledged` };
    }
    return { ready: true, reason: 'ok' };
  }

  /** Resolves true once Kafka takes points, or false after timeoutMs. */
  whenAccepting(timeoutMs: number): Promise<boolean> {
    return this.producer.whenAccepting(timeoutMs);
  }

  /**
   * Whether the journal holds nothing Kafka has not acknowledged (at least once) or a committed
   * transaction has not covered (exactly once): nothing in flight, left to read back, or to retry.
   */
  get emptied(): boolean {
    return this.journal.records === 0 && !this.journal.recovering && this.replay.backlog === 0;
  }

  /** Points the journal holds that Kafka does not have yet: in flight, and left to read back (an estimate until read). */
  get pointsLeft(): number {
    return this.journal.pendingPoints + this.journal.recoveredPoints;
  }

  /**
   * Resolves true once the journal is emptied, or false at the deadline, or as soon as it cannot be
   * (the journal or the producer failed). New points must be refused meanwhile (the server stopped):
   * what a pod removed by a scale-down holds reaches Kafka before the pod goes.
   */
  async whenEmptied(deadline: number): Promise<boolean> {
    while (!this.emptied && Date.now() < deadline && this.journal.failure === null && this.producer.refusal !== 'producer_failed') {
      await new Promise((resolve) => setTimeout(resolve, Math.max(1, Math.min(5 * POLL_INTERVAL_MS, deadline - Date.now()))));
    }
    return this.emptied;
  }

  /**
   * Stops taking points and waits until every queued point is acknowledged or has failed, at most
   * timeoutMs. Returns how many points Kafka has not acknowledged: in ACK_MODE=async they stay in the
   * journal for the next start.
   */
  async drain(timeoutMs: number): Promise<number> {
    const deadline = Date.now() + timeoutMs;
    if (this.transactions !== null) {
      const left = await this.transactions.drain(deadline);
      if (this.ackTimer !== null) clearInterval(this.ackTimer);
      this.ackTimer = null;
      await this.producer.disconnect(deadline - Date.now());
      return left;
    }
    const flushed = await this.producer.stop(deadline);
    // Failure reports of the last messages reach JavaScript through the poll loop; give it a turn.
    await new Promise((r) => setTimeout(r, POLL_INTERVAL_MS * 2));
    this.takeAcks();
    if (this.ackTimer !== null) clearInterval(this.ackTimer);
    this.ackTimer = null;
    const left = this.delivered ? (flushed ? 0 : Math.max(1, this.producer.queuedPoints)) : this.journal.pendingPoints;
    await this.producer.disconnect(deadline - Date.now());
    return left;
  }
}

/** JOURNAL_SYNC=disk: the sync a request's 202 waited for failed. */
function commitFailed(err: Error): LateFailure {
  return {
    code: 'journal_failed',
    message: `the disk failed to sync this request's journal record (${err.message}); its points may still reach Kafka (the worker restarts and produces what the journal holds): a resend may duplicate them`,
  };
}

/**
 * ACK_MODE=delivered: the answer to a request whose points were not all acknowledged. delivery_failed
 * only when librdkafka says that none of them was written (safe to resend); delivery_uncertain when
 * some were, or may have been (sent, no answer in time).
 */
export function deliveryFailed(ticket: DeliveryTicket, count: number): LateFailure {
  const written = count - ticket.failed;
  if (written === 0 && ticket.uncertain === 0) {
    return { code: 'delivery_failed', message: `none of the ${count} track points was written to Kafka (${ticket.firstError}); resend the whole request` };
  }
  const maybe = ticket.uncertain === 0 ? '' : ` and ${ticket.uncertain} may have been (sent, no answer in time)`;
  return {
    code: 'delivery_uncertain',
    message: `${ticket.failed} of ${count} track points were not acknowledged by Kafka (${ticket.firstError}); ${written} were written${maybe}: resending the whole request may duplicate them`,
  };
}
