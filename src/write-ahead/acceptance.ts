// What the HTTP edge asks of whatever takes a request's points, and the one question it asks: when
// may I answer? The edge knows no journal, no sync mode and no delivery mode; a sink of each mode
// (at-least-once.ts, delivered.ts, exactly-once.ts) knows its own, chosen once (delivery-mode.ts).
//
//   admission()    before the body is read: why nothing could be taken now, or null
//   accept(batch)  every point or none: null (taken; the 202 may go out now), a Refusal (none taken:
//                  why), or a Pending (taken; the 202 waits: for the disk with JOURNAL_SYNC=disk, for
//                  Kafka with ACK_MODE=delivered)
import type { ProducerRefusal } from '../api/errors.js';
import type { Config } from '../config.js';
import type { Journal } from '../journal/journal.js';
import type { KafkaProducer, ProducerEvents } from '../kafka/producer.js';
import type { Logger } from '../log.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import type { EncodedPoints } from '../track-point/encode.js';

/** Why nothing of a request was taken: a code of the catalogue, or a point too large for a Kafka message (413). */
export type Refusal = ProducerRefusal | 'message_too_large';

/** Why a request taken is not answered 202 after all: its points may still reach Kafka, or not (the code says). */
export interface LateFailure {
  readonly code: 'journal_failed' | 'delivery_failed' | 'delivery_uncertain';
  readonly message: string;
}

/** A request taken whose answer waits. */
export interface Pending {
  /** Calls `answer` once: with null when the 202 may go out, else why not. */
  whenAnswerable(answer: (failure: LateFailure | null) => void): void;
}

export interface PointSink {
  /** Why nothing could be taken now (asked before the body is read, and by the waiting room), or null. */
  admission(): ProducerRefusal | null;
  /** Takes every point of a request or none: null when taken and answerable now. */
  accept(batch: EncodedPoints): Refusal | Pending | null;
  /** /readyz: whether this worker takes points, and if not why. */
  readiness(): { ready: boolean; reason: string };
}

/** What the worker and `drain` ask of a sink besides: its start and its end. */
export interface DeliverySink extends PointSink {
  /** Connects in the background; what an earlier process left is produced once Kafka takes points. */
  start(): void;
  /** Resolves true once Kafka takes points, or false after timeoutMs. */
  whenAccepting(timeoutMs: number): Promise<boolean>;
  /** Whether the journal holds nothing Kafka does not have yet: nothing in flight, left to read back, or to retry. */
  readonly emptied: boolean;
  /** Points the journal holds that Kafka does not have yet (an estimate until read back). */
  readonly pointsLeft: number;
  /**
   * Resolves true once emptied, or false at the deadline or as soon as it cannot be (the journal or
   * the producer failed). New points must be refused meanwhile (the server stopped).
   */
  whenEmptied(deadline: number): Promise<boolean>;
  /**
   * Stops taking points and waits, at most timeoutMs, until what is queued is acknowledged (or
   * committed) or failed; then disconnects. Returns the points Kafka does not have.
   */
  drain(timeoutMs: number): Promise<number>;
}

/** What a sink tells its owner, given at construction. */
export interface SinkEvents {
  /** A fatal producer error: the worker ends so that a fresh one replaces it; `fenced` when another process took the slot's transactional.id. */
  onFatal(fenced: boolean): void;
}

/** What every sink is made with. */
export interface SinkOptions {
  config: Config;
  log: Logger;
  metrics: WorkerMetrics;
  journal: Journal;
  /** Makes the worker's producer for this sink: what it reports comes back to the sink. */
  producer: (events: ProducerEvents) => KafkaProducer;
  events: SinkEvents;
}
