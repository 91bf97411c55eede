// POST /track, from its headers to its answer, in one place and without uWebSockets.js: server.ts
// adapts it (routes, reading the body, corking, aborts), track-body.ts turns a body into messages,
// track-answers.ts makes every answer, and the write-ahead path (write-ahead/) takes the points.
//
//   headers ─admit()─┬─▶ refused at once, before a byte of the body is read: 415 (Content-Type or
//                    │   Content-Encoding), 413 (Content-Length), 500 (nothing can be taken now: its
//                    │   code, queue_full only when the request may not wait)
//                    ▼
//   body, read by server.ts (over MAX_BODY_BYTES while reading: tooLarge())
//                    ▼
//   take() ── decodeTrackBody: 400 / 413 / 415 ──▶ sink.accept(messages), the one question: when may I answer?
//      │         null: 202 now · a Refusal: 500 (or 413) · a Pending: 202 once it says so, else its failure
//      └─ the producer queue full: the waiting room keeps the body and takes it again, oldest first,
//         as room appears; 500 queue_full after QUEUE_FULL_WAIT_MS
//
// Every answer goes out through its exchange's answer() and is counted here, once. A refusal for the
// request's content (400, 413, 415) is also handed to the refused-requests topic when one is set
// (refused/refused-requests.ts), with the body as received.
import type { Config } from '../config.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import type { RefusedRequest, RequestClient } from '../refused/refused-requests.js';
import { JSON_VALUES, type FramingSource } from '../track-point/registry-encode.js';
import type { LateFailure, Pending, PointSink } from '../write-ahead/acceptance.js';
import { decodeTrackBody, type BodyLimits } from './track-body.js';
import { accepted, refuse, TrackAnswers, type TrackAnswer } from './track-answers.js';
import { WaitingRoom } from './waiting-room.js';

/** One POST /track as the HTTP edge holds it. */
export interface TrackExchange {
  /** performance.now() when the request came: its duration and its wait count from there. */
  readonly started: number;
  /** The client left (its connection closed): nothing to answer. */
  aborted(): boolean;
  /** Writes the answer. stopReading: the rest of the body is not wanted (the connection closes). */
  answer(answer: TrackAnswer, stopReading: boolean): void;
  /** Who sent the request; asked before the answer, only of a request refused for its content. */
  client(): RequestClient;
}

/** Where requests refused for their content are kept (refused/refused-requests.ts). */
export interface RefusedKeeper {
  /** Whether the next refusal is kept (within MQ_REFUSED_RATE): asked before anything is gathered. */
  admit(): boolean;
  keep(request: RefusedRequest): void;
}

/** What is known of a refused request's body besides its answer. */
type RefusedBody = Pick<RefusedRequest, 'received' | 'decoded' | 'gzipped' | 'partial' | 'sentBytes' | 'contentType' | 'contentEncoding'>;

/** A request admit() let through: its body is to be read, then taken. */
export interface Admitted {
  readonly gzipped: boolean;
  /** The producer queue is full: the body is read and waits for room. */
  readonly waits: boolean;
}

const JSON_TYPE = 'application/json';

/** `application/json`, any case, parameters such as charset allowed; missing means JSON. */
export function isJsonContentType(value: string): boolean {
  if (value === '' || value === JSON_TYPE) return true;
  const semi = value.indexOf(';');
  return (semi < 0 ? value : value.slice(0, semi)).trim().toLowerCase() === JSON_TYPE;
}

export class TrackHandler {
  readonly maxBodyBytes: number;
  private readonly limits: BodyLimits;
  private readonly answers: TrackAnswers;
  private readonly waiting: WaitingRoom;
  /** Taken requests whose answer waits (a Pending): shutdown waits for them. */
  private awaiting = 0;

  constructor(
    config: Config,
    private readonly sink: PointSink,
    private readonly metrics: WorkerMetrics,
    /** null: MQ_REFUSED_TOPIC is off, and refusals cost nothing more. */
    private readonly refusedKeeper: RefusedKeeper | null = null,
    /** MQ_VALUE_FORMAT: the registry format's framing once its schema id is known; JSON's is null. */
    private readonly values: FramingSource = JSON_VALUES,
  ) {
    this.maxBodyBytes = config.maxBodyBytes;
    this.limits = { maxBodyBytes: config.maxBodyBytes, maxPoints: config.maxPoints };
    this.answers = new TrackAnswers({
      brokers: config.brokers,
      topic: config.topic,
      brokerDownGraceMs: config.brokerDownGraceMs,
      queueFullWaitMs: config.queueFullWaitMs,
      maxBodyBytes: config.maxBodyBytes,
    });
    this.waiting = new WaitingRoom(() => sink.admission(), config.queueFullWaitMs, config.queueFullWaitMaxBytes);
    metrics.scrapeWaiting(() => this.waiting.size);
  }

  /** Requests whose body is kept in the waiting room: shutdown waits for them. */
  get waitingForRoom(): number {
    return this.waiting.size;
  }

  /** Taken requests whose answer waits for the disk or Kafka: shutdown waits for them. */
  get awaitingAnswer(): number {
    return this.awaiting;
  }

  /**
   * The one admission decision, from the headers: null when the request was answered (refused), else
   * how to take its body. Under overload a worker refuses most requests: answered before the body is
   * read, a refusal costs no callback per chunk, and uWS skips the body's bytes with the connection
   * kept open. A full queue is the exception: the body is read and the request waits for room.
   */
  admit(x: TrackExchange, contentType: string, contentEncoding: string, contentLength: string): Admitted | null {
    if (!isJsonContentType(contentType)) return this.refuseFromHeaders(x, this.answers.unsupportedType, contentType, contentEncoding, contentLength);
    const gzipped = contentEncoding === 'gzip' || contentEncoding === 'x-gzip';
    if (!gzipped && contentEncoding !== '' && contentEncoding !== 'identity')
      return this.refuseFromHeaders(x, this.answers.unsupportedEncoding, contentType, contentEncoding, contentLength);
    if (contentLength !== '' && Number(contentLength) > this.maxBodyBytes)
      return this.refuseFromHeaders(x, this.answers.tooLarge, contentType, contentEncoding, contentLength);
    const refusal = this.sink.admission();
    const waits = this.waiting.mayWait(refusal);
    if (refusal !== null && !waits) return this.answer(x, this.answers.refusals[refusal], false);
    return { gzipped, waits };
  }

  /**
   * The body grew past MAX_BODY_BYTES while being read: refused, the rest of it unread. `readSoFar`
   * gathers what was read, asked only when the refusal is kept.
   */
  tooLarge(x: TrackExchange, gzipped: boolean, readSoFar: () => Uint8Array): void {
    if (this.refusedKeeper?.admit() === true) {
      this.keepRefused(x, this.answers.tooLarge, {
        received: readSoFar(),
        decoded: null,
        gzipped,
        partial: true,
        sentBytes: null,
        contentType: '',
        contentEncoding: gzipped ? 'gzip' : '',
      });
    }
    this.answer(x, this.answers.tooLarge, true);
  }

  /**
   * A whole body: taken, refused, or (the queue full) left to wait for room. `owned`: the body is not
   * uWS's memory (which it reuses after the callback), so it can be kept as it is.
   */
  take(x: TrackExchange, body: Uint8Array, owned: boolean, gzipped: boolean, waits: boolean): void {
    if (waits) return this.waitForRoom(x, body, owned, gzipped);
    const decoded = decodeTrackBody(body, gzipped, this.limits, this.values.framing);
    if ('refused' in decoded)
      return this.refuseBody(x, refuse(decoded.refused, decoded.message, decoded.points, decoded.details), body, gzipped, decoded.inflated ?? null);
    if (decoded.count === 0) return void this.answer(x, accepted(0), false);
    const taken = this.sink.accept(decoded);
    if (taken === null) this.answer(x, accepted(decoded.count), false);
    else if (typeof taken !== 'string') this.answerWhenAnswerable(x, taken, decoded.count);
    else if (taken === 'queue_full' && this.waiting.mayWait(taken)) this.waitForRoom(x, body, owned, gzipped);
    else if (taken === 'message_too_large') this.refuseBody(x, this.answers.refused(taken, decoded.count, decoded.largestValue), body, gzipped, null);
    else this.answer(x, this.answers.refused(taken, decoded.count, decoded.largestValue), false);
  }

  /** A request refused for its body (400, 413): kept when the topic is set, then answered. */
  private refuseBody(x: TrackExchange, answer: TrackAnswer, body: Uint8Array, gzipped: boolean, inflated: Uint8Array | null): void {
    if (this.refusedKeeper?.admit() === true) {
      this.keepRefused(x, answer, {
        received: body,
        decoded: inflated,
        gzipped,
        partial: false,
        sentBytes: body.byteLength,
        contentType: '',
        contentEncoding: gzipped ? 'gzip' : '',
      });
    }
    this.answer(x, answer, false);
  }

  /** A request refused from its headers (415, 413 by Content-Length): kept without a body, then answered. */
  private refuseFromHeaders(x: TrackExchange, answer: TrackAnswer, contentType: string, contentEncoding: string, contentLength: string): null {
    if (this.refusedKeeper?.admit() === true) {
      const sentBytes = /^\d+$/.test(contentLength) ? Number(contentLength) : null;
      this.keepRefused(x, answer, { received: null, decoded: null, gzipped: false, partial: false, sentBytes, contentType, contentEncoding });
    }
    return this.answer(x, answer, true);
  }

  /** Hands an admitted refusal over, with its answer and its client. */
  private keepRefused(x: TrackExchange, answer: TrackAnswer, body: RefusedBody): void {
    if (this.refusedKeeper === null || answer.reason === undefined) return;
    this.refusedKeeper.keep({
      ...body,
      code: answer.reason,
      status: answer.status,
      message: answer.message ?? '',
      ...(answer.details === undefined ? {} : { details: answer.details }),
      client: x.client(),
    });
  }

  /** A request taken whose answer waits: 202 once the write-ahead path says so, else its failure. */
  private answerWhenAnswerable(x: TrackExchange, pending: Pending, points: number): void {
    this.awaiting++;
    pending.whenAnswerable((failure: LateFailure | null) => {
      this.awaiting--;
      this.answer(x, failure === null ? accepted(points) : this.answers.late(failure, points), false);
    });
  }

  /** The request waits with a copy of its body until the waiting room lets it go on or refuses it. */
  private waitForRoom(x: TrackExchange, body: Uint8Array, owned: boolean, gzipped: boolean): void {
    const kept = owned ? body : Buffer.copyBytesFrom(body);
    const entered = this.waiting.enter({
      since: x.started,
      bytes: kept.byteLength,
      release: (refusal) => {
        if (x.aborted()) return; // the client left while it waited: nothing was taken, nothing to answer
        if (refusal === null) this.take(x, kept, true, gzipped, false);
        else this.answer(x, this.answers.refusals[refusal], false);
      },
    });
    if (!entered) this.answer(x, this.answers.refusals.queue_full, false);
  }

  /** Counts the answer, then writes it unless the client left. */
  private answer(x: TrackExchange, answer: TrackAnswer, stopReading: boolean): null {
    const { tally, duration, requestPoints } = this.metrics.track;
    if (answer.status === 202) {
      tally.points += answer.points;
      if (answer.points > 0) requestPoints.observe(answer.points);
    } else if (answer.reason !== undefined) {
      tally.rejected[answer.reason] += answer.points;
      tally.refused[answer.reason]++;
    }
    tally.byStatus[answer.status]++;
    duration.observe((performance.now() - x.started) / 1000);
    // The client left while Kafka or the disk answered: the points were still taken, and counted.
    if (!x.aborted()) x.answer(answer, stopReading);
    return null;
  }
}
