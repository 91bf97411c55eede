// At least once (the default): every point of a request is in the journal before its 202, and leaves
// it once Kafka acknowledged it.
//
//   accept ──▶ journal.append: a record, in the OS before the answer ──▶ producer.produce, tagged with
//     │        the record's id (what librdkafka refuses midway waits in replay)
//     └─ answer: at once (JOURNAL_SYNC=process), or once the record is on the disk (JOURNAL_SYNC=disk:
//        a Pending, answered by the journal's group commit)
//   acknowledge ── every poll while records are in flight (ack-follower.ts): a record done is marked,
//     a segment all done is deleted
//   replay ── what failed after its 202, and what an earlier process left (replay.ts), produced again
//     under its record's id with its acceptance time
//   drain ── flush, the last acknowledgements taken; what Kafka has not acknowledged stays in the
//     journal for the slot's next start
import type { ProducerRefusal } from '../api/errors.js';
import type { Journal } from '../journal/journal.js';
import type { KafkaProducer } from '../kafka/producer.js';
import { Throttled } from '../log.js';
import type { EncodedPoints } from '../track-point/encode.js';
import type { DeliverySink, Pending, Refusal, SinkOptions } from './acceptance.js';
import { followedProducer, type AckFollower } from './ack-follower.js';
import { Ledger } from './ledger.js';
import { Admission, afterCommit, appendRecord, exportFigures } from './admission.js';
import { whenEmptied } from './every-poll.js';
import type { Replay } from './replay.js';

export class AtLeastOnceSink implements DeliverySink {
  private readonly journal: Journal;
  private readonly ledger: Ledger;
  private readonly producer: KafkaProducer;
  private readonly admit: Admission;
  private readonly replay: Replay;
  private readonly acks: AckFollower;
  private readonly journalErrors: Throttled;
  /**
   * JOURNAL_SYNC=disk: the answer of every request taken waits for the group commit after its record.
   * One object serves them all: the edge registers its answer at once, before the next request is taken.
   */
  private readonly afterCommit: Pending | null;

  constructor(opts: SinkOptions) {
    const { config, log, metrics, journal } = opts;
    this.journal = journal;
    this.ledger = new Ledger(journal);
    ({ producer: this.producer, replay: this.replay, acks: this.acks } = followedProducer(opts, this.ledger));
    const kafka = this.producer;
    this.admit = new Admission({ journal, journaled: true, producer: kafka, maxPoints: config.queueMaxPoints, held: () => this.replay.backlog });
    this.journalErrors = new Throttled(log, 'error', 'cannot write the journal: POST /track answers 500 journal_full until it can');
    this.afterCommit = afterCommit(config.journalSync, journal);
    exportFigures(metrics, kafka, this.ledger, () => this.replay.counts);
  }

  start(): void {
    this.producer.start();
    if (this.journal.recovering) this.acks.follow();
  }

  admission(): ProducerRefusal | null {
    return this.admit.beforeBody();
  }

  /** Every point of the request or none: the journal first, then one native call hands the request to librdkafka. */
  accept(batch: EncodedPoints): Refusal | Pending | null {
    const refusal = this.admit.forBatch(batch);
    if (refusal !== null) return refusal;
    const timestamp = Date.now();
    const record = appendRecord(this.ledger, batch, timestamp, this.journalErrors);
    if (typeof record === 'string') return record;
    const taken = this.producer.produce(batch, record.id, timestamp);
    if (taken < batch.count) this.replay.keepUnproduced(record.id, batch, taken);
    this.acks.follow();
    return this.afterCommit;
  }

  readiness(): { ready: boolean; reason: string } {
    return this.admit.readiness();
  }

  whenAccepting(timeoutMs: number): Promise<boolean> {
    return this.producer.whenAccepting(timeoutMs);
  }

  get emptied(): boolean {
    return this.acks.emptied;
  }

  get pointsLeft(): number {
    return this.ledger.pointsLeft;
  }

  whenEmptied(deadline: number): Promise<boolean> {
    return whenEmptied(() => this.emptied, this.journal, this.producer, deadline);
  }

  /** What Kafka has not acknowledged at the deadline stays in the journal for the next start. */
  async drain(timeoutMs: number): Promise<number> {
    const deadline = Date.now() + timeoutMs;
    await this.producer.stop(deadline);
    await this.acks.finish();
    const left = this.ledger.pendingPoints;
    await this.producer.disconnect(deadline - Date.now());
    return left;
  }
}
