// What the HTTP edge asks of whatever takes a request's points, and the one question it asks: when
// may I answer? The edge knows no journal, no sync mode and no acknowledgement mode; the write-ahead
// path (write-ahead.ts) knows them all.
//
//   admission()    before the body is read: why nothing could be taken now, or null
//   accept(batch)  every point or none: null (taken; the 202 may go out now), a Refusal (none taken:
//                  why), or a Pending (taken; the 202 waits: for the disk with JOURNAL_SYNC=disk, for
//                  Kafka with ACK_MODE=delivered)
import type { ProducerRefusal } from '../api/errors.js';
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
