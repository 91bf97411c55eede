// POST /track's body, once read: decompress, decode, parse, validate, encode, enqueue. The answer to
// each outcome is made here; track-handler.ts decides what comes before (admission) and after (waiting
// for room, for Kafka or for the disk).
//
//   bytes ─gunzip?─┬─▶ single pass: all points valid? ─────────────────────────────────────┬─▶ producer
//     413 / 400    └─▶ UTF-8 check ─▶ JSON.parse ─▶ array? ≤ MAX_POINTS? ─▶ zod ─▶ encode ─┘     500
//                         400            400          400      413           400     413
// The single pass (track-point/single-pass.ts) takes ordinary bodies of valid points; anything else
// takes the general path, which decides every answer but 202.
import { isUtf8 } from 'node:buffer';
import { gunzipSync } from 'node:zlib';
import { errorAnswer, PRODUCER_REFUSALS, refusalMessage, type HttpStatus, type ProducerRefusal, type RefusalContext, type TrackRejection } from '../api/errors.js';
import type { DeliveryTicket } from '../kafka/delivery-reports.js';
import type { Refusal } from '../kafka/producer.js';
import { encodePoints, type EncodedPoints } from '../track-point/encode.js';
import { validatePoints, type PointIssue } from '../track-point/schema.js';
import { encodeValidBody } from '../track-point/single-pass.js';

export interface TrackOutcome {
  status: HttpStatus;
  /** JSON; the answers of accepted requests as bytes, ready for the socket (acceptedBody). */
  body: string | Buffer;
  /** Set on 500: the client should retry after this many seconds. */
  retryAfter?: number;
  /** Points taken (202) or refused (with the reason), for metrics. */
  points: number;
  reason?: TrackRejection;
  /** ACK_MODE=delivered: the points are queued; the answer waits for the ticket to settle. */
  awaitingDelivery?: boolean;
  /** Set on a 500 of the producer's: why it took nothing (the waiting room reads it). */
  refusal?: ProducerRefusal;
}

/** What POST /track needs from the producer. */
export interface PointSink {
  /** Why nothing could be taken now (asked before the body is read), or null. */
  admission(): ProducerRefusal | null;
  /** Takes all points or none; null when taken. With a ticket, its answer waits for the ticket. */
  tryEnqueue(batch: EncodedPoints, ticket: DeliveryTicket | null): Refusal | null;
}

/** The limits a body is held to, and the answer to each refusal of the producer (refusalAnswers). */
export interface TrackLimits {
  maxBodyBytes: number;
  maxPoints: number;
  refusals: Readonly<Record<ProducerRefusal, TrackOutcome>>;
}

/** The 202 answers of up to this many points are built at start-up and kept. */
const ACCEPTED_BODIES_KEPT = 1000;
const buildAccepted = (count: number): Buffer => Buffer.from(`{"accepted":${count}}`, 'latin1');
const acceptedBodies: readonly Buffer[] = Array.from({ length: ACCEPTED_BODIES_KEPT + 1 }, (_, count) => buildAccepted(count));

/** The body of a 202: {"accepted":count}. */
export function acceptedBody(count: number): Buffer {
  return count <= ACCEPTED_BODIES_KEPT ? (acceptedBodies[count] as Buffer) : buildAccepted(count);
}

/** A refusal of the whole request: its status is the catalogue's for the code. */
export function refuse(code: TrackRejection, message: string, points = 0, details?: readonly PointIssue[]): TrackOutcome {
  const { status, body, retryAfter } = errorAnswer(code, message, details);
  return retryAfter === undefined ? { status, body, points, reason: code } : { status, body, points, reason: code, retryAfter };
}

/** ticket: null but in ACK_MODE=delivered and JOURNAL_SYNC=disk, where the answer waits for it. */
export function handleTrackBody(raw: Uint8Array, gzipped: boolean, limits: TrackLimits, sink: PointSink, ticket: DeliveryTicket | null = null): TrackOutcome {
  let bytes = raw;
  if (gzipped) {
    try {
      // maxOutputLength bounds a gzip bomb: inflating stops at the limit instead of filling memory.
      // Synchronous because the output is at most MAX_BODY_BYTES (1 MiB by default: ~2 ms).
      bytes = gunzipSync(raw, { maxOutputLength: limits.maxBodyBytes });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') {
        return refuse('payload_too_large', `body is larger than ${limits.maxBodyBytes} bytes once decompressed`);
      }
      return refuse('invalid_json', `body is not valid gzip: ${(err as Error).message}`);
    }
  }

  // A body of valid points, as nearly every request is, goes from bytes to messages in one pass.
  const direct = encodeValidBody(bytes, limits.maxPoints);
  if (direct !== null) return enqueue(direct, limits, sink, ticket);

  // Buffer#toString would replace invalid sequences with U+FFFD and let them through; refuse instead.
  if (!isUtf8(bytes)) return refuse('invalid_json', 'body is not valid UTF-8');
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');

  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    return refuse('invalid_json', text.length === 0 ? 'body is empty; expected a JSON array of track points' : `body is not valid JSON: ${(err as Error).message}`);
  }
  if (!Array.isArray(parsed)) {
    return refuse('validation_failed', 'body must be a JSON array of track points');
  }
  const count = parsed.length;
  if (count === 0) return { status: 202, body: acceptedBody(0), points: 0 };
  if (count > limits.maxPoints) {
    return refuse('payload_too_large', `${count} track points in one request; at most ${limits.maxPoints} (MAX_POINTS)`, count);
  }

  const result = validatePoints(parsed);
  if (!result.ok) {
    const n = result.invalidPoints;
    return refuse('validation_failed', `${n} invalid track point${n === 1 ? '' : 's'}`, count, result.details);
  }

  return enqueue(encodePoints(result.points), limits, sink, ticket);
}

/** Hands the messages of an accepted request to the producer: all or none. */
function enqueue(batch: EncodedPoints, limits: TrackLimits, sink: PointSink, ticket: DeliveryTicket | null): TrackOutcome {
  const count = batch.count;
  const refusal = sink.tryEnqueue(batch, ticket);
  if (refusal === null) return { status: 202, body: acceptedBody(count), points: count, awaitingDelivery: ticket !== null };
  if (refusal === 'message_too_large') {
    return refuse('payload_too_large', `a track point encodes to ${batch.largestValue} bytes, above the Kafka message size limit`, count);
  }
  return producerRefused(refusal, limits, count);
}

/**
 * ACK_MODE=delivered: the answer to an accepted request whose points were not all acknowledged.
 * delivery_failed only when librdkafka says that none of them was written (safe to resend);
 * delivery_uncertain when some were written, or may have been (sent, no answer in time).
 */
export function deliveryFailed(ticket: DeliveryTicket, count: number): TrackOutcome {
  const written = count - ticket.failed;
  if (written === 0 && ticket.uncertain === 0) {
    const message = `none of the ${count} track points was written to Kafka (${ticket.firstError}); resend the whole request`;
    return refuse('delivery_failed', message, count);
  }
  const maybe = ticket.uncertain === 0 ? '' : ` and ${ticket.uncertain} may have been (sent, no answer in time)`;
  const message = `${ticket.failed} of ${count} track points were not acknowledged by Kafka (${ticket.firstError}); ${written} were written${maybe}: resending the whole request may duplicate them`;
  return refuse('delivery_uncertain', message, count);
}

/**
 * The 500 of each producer refusal, made once and kept (track-handler.ts): a worker under overload
 * refuses most requests, and making each answer anew (JSON.stringify, an object spread into a new
 * shape, the body turned into UTF-8 by uWS) took a third of a refusal's CPU (a 100-point request
 * refused: 11.3-12.0 µs, 7.4-7.5 once made once; bench/HISTORY.md).
 */
export function refusalAnswers(context: RefusalContext): Readonly<Record<ProducerRefusal, TrackOutcome>> {
  const answers: Partial<Record<ProducerRefusal, TrackOutcome>> = {};
  for (const refusal of PRODUCER_REFUSALS) {
    const { status, body, retryAfter } = errorAnswer(refusal, refusalMessage(refusal, context));
    // Frozen: one object answers every request refused for this reason.
    answers[refusal] = Object.freeze({ status, body: Buffer.from(body, 'utf8'), points: 0, reason: refusal, retryAfter, refusal });
  }
  return answers as Record<ProducerRefusal, TrackOutcome>;
}

/** The 500 of a producer refusal: nothing of the request was taken; `points` are counted as refused. */
function producerRefused(refusal: ProducerRefusal, limits: TrackLimits, points: number): TrackOutcome {
  const answer = limits.refusals[refusal];
  return points === 0 ? answer : { ...answer, points };
}
