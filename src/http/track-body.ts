// POST /track after the body has been read: decompress, decode, parse, validate, encode, enqueue.
// Independent of uWebSockets.js so that it reads top to bottom and can be tested without sockets.
//
//   bytes ─gunzip?─┬─▶ single pass: all points valid? ─────────────────────────────────────┬─▶ producer
//     413 / 400    └─▶ UTF-8 check ─▶ JSON.parse ─▶ array? ≤ MAX_POINTS? ─▶ zod ─▶ encode ─┘     500
//                         400            400          400      413           400     413
// The single pass (track-point/single-pass.ts) takes ordinary bodies of valid points; anything else
// takes the general path, which decides every answer but 202.
import { isUtf8 } from 'node:buffer';
import { gunzipSync } from 'node:zlib';
import { errorAnswer, type HttpStatus, type PointIssue, type TrackRejection } from '../errors.js';
import type { DeliveryTicket } from '../kafka/delivery-reports.js';
import type { Refusal } from '../kafka/producer.js';
import { encodePoints, type EncodedPoints } from '../track-point/encode.js';
import { validatePoints } from '../track-point/schema.js';
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
  /** Set on a 500 of the producer's: why it took nothing (the queue_full counter reads it). */
  refusal?: Refusal;
}

/** What the track body needs from the producer. */
export interface PointSink {
  /** Why nothing could be taken now (checked before parsing), or null. */
  admission(): Refusal | null;
  /** Takes all points or none; null when taken. With a ticket, every point reports back to it. */
  tryEnqueue(batch: EncodedPoints, ticket: DeliveryTicket | null): Refusal | null;
}

export interface TrackLimits {
  maxBodyBytes: number;
  maxPoints: number;
  brokerDownGraceMs: number;
  topic: string;
}

/** Retry-After of every 500 (broker_unavailable, delivery_failed), in seconds. */
const RETRY_AFTER_S = 1;

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
  const { status, body } = errorAnswer(code, message, details);
  return { status, body, points, reason: code };
}

/** The answer to a request when the producer can take nothing now, whatever its body; null: read it. */
function refusedBeforeBody(limits: TrackLimits, sink: PointSink): TrackOutcome | null {
  const refusal = sink.admission();
  return refusal === null ? null : refusalAnswer(refusal, limits);
}

/** The 500 of a request the producer took nothing of, for this reason (built once, shared). */
export function refusalAnswer(refusal: Refusal, limits: TrackLimits): TrackOutcome {
  return brokerUnavailable(refusal, limits, 0);
}

/** ticket: null in ACK_MODE=async; in delivered mode, the request's ticket for tryEnqueue. */
export function handleTrackBody(raw: Uint8Array, gzipped: boolean, limits: TrackLimits, sink: PointSink, ticket: DeliveryTicket | null = null): TrackOutcome {
  const early = refusedBeforeBody(limits, sink);
  if (early !== null) return early;

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
  return brokerUnavailable(refusal, limits, count);
}

/** ACK_MODE=delivered: the answer once some points of an accepted request were not acknowledged. */
export function deliveryFailed(ticket: DeliveryTicket, count: number): TrackOutcome {
  const message = `${ticket.failed} of ${count} track points were not acknowledged by Kafka (${ticket.firstError}); resend the whole request`;
  return { ...refuse('delivery_failed', message, count), retryAfter: RETRY_AFTER_S };
}

/** The 500 of each producer refusal for one set of limits: status, body and reason fixed, no points. */
type RefusalAnswers = Readonly<Record<Refusal, TrackOutcome>>;
const refusalAnswersByLimits = new WeakMap<TrackLimits, RefusalAnswers>();

/**
 * The answers are built once per limits object (the server keeps one) and reused: a worker under
 * overload refuses most requests, and building each answer anew (JSON.stringify, an object spread
 * into a new shape, the body turned into UTF-8 by uWS) took a third of a refusal's CPU (a 100-point
 * request refused: 11.3-12.0 µs, 7.4-7.5 once built once; bench/HISTORY.md).
 */
function refusalAnswers(limits: TrackLimits): RefusalAnswers {
  let answers = refusalAnswersByLimits.get(limits);
  if (answers === undefined) {
    const build = (refusal: Refusal): TrackOutcome => {
      const { status, body } = errorAnswer('broker_unavailable', refusalMessage(refusal, limits));
      // Frozen: one object answers every request refused for this reason.
      return Object.freeze({ status, body: Buffer.from(body, 'utf8'), points: 0, reason: 'broker_unavailable', retryAfter: RETRY_AFTER_S, refusal });
    };
    answers = {
      connecting: build('connecting'),
      fatal_error: build('fatal_error'),
      topic_unknown: build('topic_unknown'),
      broker_down: build('broker_down'),
      broker_stalled: build('broker_stalled'),
      queue_full: build('queue_full'),
      produce_failed: build('produce_failed'),
      shutting_down: build('shutting_down'),
      spill_full: build('spill_full'),
      message_too_large: build('message_too_large'),
    };
    refusalAnswersByLimits.set(limits, answers);
  }
  return answers;
}

/** 500 broker_unavailable: nothing of the request was taken; `points` are counted as refused. */
function brokerUnavailable(refusal: Refusal, limits: TrackLimits, points: number): TrackOutcome {
  const answer = refusalAnswers(limits)[refusal];
  return points === 0 ? answer : { status: answer.status, body: answer.body, points, reason: answer.reason, retryAfter: answer.retryAfter, refusal };
}

function refusalMessage(refusal: Refusal, limits: TrackLimits): string {
  switch (refusal) {
    case 'connecting': return 'not connected to Kafka yet; nothing from this request was accepted';
    case 'fatal_error': return 'the Kafka producer of this worker hit a fatal error; nothing from this request was accepted';
    case 'topic_unknown': return `topic ${limits.topic} does not exist or has no leader; nothing from this request was accepted`;
    case 'broker_down': return `no Kafka broker reachable for more than ${limits.brokerDownGraceMs} ms; nothing from this request was accepted`;
    case 'broker_stalled': return `a Kafka broker has answered nothing for more than ${limits.brokerDownGraceMs} ms while requests wait; nothing from this request was accepted`;
    case 'queue_full': return 'the producer queue is full (Kafka is slower than the incoming points); nothing from this request was accepted';
    case 'produce_failed': return 'the Kafka producer refused the points; resend the whole request';
    case 'shutting_down': return 'this worker is shutting down; nothing from this request was accepted';
    case 'spill_full': return 'the spill journal for points Kafka could not take is full or cannot be written (SPILL_MAX_BYTES); nothing from this request was accepted';
    case 'message_too_large': return 'a track point is larger than the Kafka message size limit';
  }
}
