// ACK_MODE=delivered: a request's points skip the journal, and its answer waits for Kafka.
//
//   accept ──▶ producer.produceWithTicket: a report per message back to the request's ticket
//     └─ answer: a Pending, settled once Kafka answered for every point (acks=all) or at the deadline:
//        202, or 500 delivery_failed / delivery_uncertain (deliveryFailed says which)
//   replay ── what an earlier process of the slot left in the journal (another mode before, a crash)
//     is produced again all the same, and followed to its acknowledgements (ack-follower.ts)
//   drain ── flush; the points still unanswered at the deadline are counted (the worker exits 4)
import type { ProducerRefusal } from '../api/errors.js';
import type { Journal } from '../journal/journal.js';
import { newTicket, type DeliveryTicket } from '../kafka/delivery-reports.js';
import type { KafkaProducer } from '../kafka/producer.js';
import type { EncodedPoints } from '../track-point/encode.js';
import type { DeliverySink, LateFailure, Pending, Refusal, SinkOptions } from './acceptance.js';
import { followedProducer, type AckFollower } from './ack-follower.js';
import { Ledger } from './ledger.js';
import { Admission, exportFigures } from './admission.js';
import { whenEmptied } from './every-poll.js';
import type { Replay } from './replay.js';

export class DeliveredSink implements DeliverySink {
  private readonly journal: Journal;
  /** What an earlier process left, in flight again: new requests skip the journal. */
  private readonly ledger: Ledger;
  private readonly producer: KafkaProducer;
  private readonly admit: Admission;
  private readonly replay: Replay;
  private readonly acks: AckFollower;

  constructor(opts: SinkOptions) {
    const { config, metrics, journal } = opts;
    this.journal = journal;
    this.ledger = new Ledger(journal);
    ({ producer: this.producer, replay: this.replay, acks: this.acks } = followedProducer(opts, this.ledger));
    const kafka = this.producer;
    this.admit = new Admission({ journal, journaled: false, producer: kafka, maxPoints: config.queueMaxPoints, held: () => this.replay.backlog });
    exportFigures(metrics, kafka, this.ledger, () => this.replay.counts);
  }

  start(): void {
    this.producer.start();
    if (this.journal.recovering) this.acks.follow();
  }

  admission(): ProducerRefusal | null {
    return this.admit.beforeBody();
  }

  /** No journal: answered once Kafka answered for every point, or at the deadline. */
  accept(batch: EncodedPoints): Refusal | Pending {
    const refusal = this.admit.forBatch(batch);
    if (refusal !== null) return refusal;
    const count = batch.count;
    let answer: ((failure: LateFailure | null) => void) | null = null;
    const ticket = newTicket((t) => answer?.(t.failed === 0 ? null : deliveryFailed(t, count)));
    const refused = this.producer.produceWithTicket(batch, ticket);
    if (refused !== null) return refused;
    // Reports come through the poll, after this returns: the answer is registered first.
    return { whenAnswerable: (a) => void (answer = a) };
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

  /** Returns the points Kafka had not answered for at the deadline (at least 1 when librdkafka's queue did not empty). */
  async drain(timeoutMs: number): Promise<number> {
    const deadline = Date.now() + timeoutMs;
    const flushed = await this.producer.stop(deadline);
    await this.acks.finish();
    const left = flushed ? 0 : Math.max(1, this.producer.queuedPoints);
    await this.producer.disconnect(deadline - Date.now());
    return left;
  }
}

/**
 * The answer to a request whose points were not all acknowledged. delivery_failed only when
 * librdkafka says that none of them was written (safe to resend); delivery_uncertain when some were,
 * or may have been (sent, no answer in time).
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
