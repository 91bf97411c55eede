// Every answer POST /track gives, in one module: the 202 and its body, the refusals of a request from
// its headers or its body (400, 413, 415, with details), the refusals of the write-ahead path (500,
// made once and kept), and the late failures of a request whose 202 waited (for the disk, or Kafka).
// Statuses, codes and Retry-After come from the catalogue (api/errors.ts).
import {
  errorAnswer,
  PRODUCER_REFUSALS,
  refusalMessage,
  type HttpStatus,
  type ProducerRefusal,
  type RefusalContext,
  type TrackRejection,
} from '../api/errors.js';
import type { PointIssue } from '../track-point/schema.js';
import type { LateFailure, Refusal } from '../write-ahead/acceptance.js';

export interface TrackAnswer {
  readonly status: HttpStatus;
  /** JSON, as bytes ready for the socket (one type for every answer: see answerOf). */
  readonly body: Buffer;
  /** Set on 500: the client should retry after this many seconds. */
  readonly retryAfter?: number;
  /** Points taken (202) or refused (with the reason), for the metrics. */
  readonly points: number;
  readonly reason?: TrackRejection;
  /** Set on a refusal of the write-ahead path: why it took nothing (the waiting room reads it). */
  readonly refusal?: ProducerRefusal;
  /** A refusal's message and details, as in its body (the refused-requests topic keeps them). */
  readonly message?: string;
  readonly details?: readonly PointIssue[];
}

/**
 * Every answer has the same fields in the same order (those it lacks undefined), frozen, its body
 * bytes: one hidden class, so the code that writes and counts answers, compiled on the 202s of valid
 * requests, is not thrown away (a "wrong map" deoptimization) when the first refusals of a flood
 * arrive (track-body-warm-up.ts does the same for the decoding).
 */
function answerOf(
  status: HttpStatus,
  body: Buffer,
  points: number,
  why: Partial<Pick<TrackAnswer, 'retryAfter' | 'reason' | 'refusal' | 'message' | 'details'>> = {},
): TrackAnswer {
  return Object.freeze({
    status,
    body,
    retryAfter: why.retryAfter,
    points,
    reason: why.reason,
    refusal: why.refusal,
    message: why.message,
    details: why.details,
  });
}

/** The 202 answers of up to this many points are made at start-up and kept. */
const ACCEPTED_KEPT = 1000;
const acceptedOf = (count: number): TrackAnswer => answerOf(202, Buffer.from(`{"accepted":${count}}`, 'latin1'), count);
const ACCEPTED: readonly TrackAnswer[] = Array.from({ length: ACCEPTED_KEPT + 1 }, (_, count) => acceptedOf(count));

/** 202 {"accepted": count}. */
export function accepted(count: number): TrackAnswer {
  return count <= ACCEPTED_KEPT ? ACCEPTED[count]! : acceptedOf(count);
}

/** A refusal of the whole request: its status is the catalogue's for the code. */
export function refuse(code: TrackRejection, message: string, points = 0, details?: readonly PointIssue[]): TrackAnswer {
  const { status, body, retryAfter } = errorAnswer(code, message, details);
  return answerOf(status, Buffer.from(body, 'utf8'), points, { retryAfter, reason: code, message, details });
}

/**
 * The answers that do not depend on the request, made once: under overload a worker refuses most
 * requests, and making each answer anew (JSON.stringify, an object spread into a new shape, the body
 * turned into UTF-8 by uWS) was a third of a refusal's CPU.
 */
export class TrackAnswers {
  readonly unsupportedType = refuse('unsupported_media_type', 'Content-Type must be application/json');
  readonly unsupportedEncoding = refuse('unsupported_media_type', 'Content-Encoding must be gzip or identity');
  readonly tooLarge: TrackAnswer;
  /** The 500 of each refusal of the write-ahead path; frozen: one object answers every request refused for it. */
  readonly refusals: Readonly<Record<ProducerRefusal, TrackAnswer>>;

  constructor(context: RefusalContext & { maxBodyBytes: number }) {
    this.tooLarge = refuse('payload_too_large', `body is larger than ${context.maxBodyBytes} bytes (MAX_BODY_BYTES)`);
    const refusals: Partial<Record<ProducerRefusal, TrackAnswer>> = {};
    for (const refusal of PRODUCER_REFUSALS) {
      const { status, body, retryAfter } = errorAnswer(refusal, refusalMessage(refusal, context));
      refusals[refusal] = answerOf(status, Buffer.from(body, 'utf8'), 0, { retryAfter, reason: refusal, refusal });
    }
    this.refusals = refusals as Record<ProducerRefusal, TrackAnswer>;
  }

  /** Nothing of a request of `points` points was taken; `largestValue`: its largest message, for a 413. */
  refused(refusal: Refusal, points: number, largestValue: number): TrackAnswer {
    if (refusal === 'message_too_large')
      return refuse('payload_too_large', `a track point encodes to ${largestValue} bytes, above the Kafka message size limit`, points);
    const answer = this.refusals[refusal];
    return points === 0 ? answer : answerOf(answer.status, answer.body, points, answer);
  }

  /** A request taken whose 202 waited, and failed. */
  late(failure: LateFailure, points: number): TrackAnswer {
    return refuse(failure.code, failure.message, points);
  }
}
