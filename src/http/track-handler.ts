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
// Every answer goes out through its exchange's answer() and is counted here, once.
import type { Config } from '../config.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
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
}

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
  ) {
    this.maxBodyBytes = config.maxBodyBytes;
    this.limits = { maxBodyBytes: config.maxBodyBytes, maxPoints: config.maxPoints };
    this.answers = new TrackAnswers({ brokers: config.brokers, topic: config.topic, brokerDownGraceMs: config.brokerDownGraceMs, queueFullWaitMs: config.queueFullWaitMs, maxBodyBytes: config.maxBodyBytes });
    this.waiting = new WaitingRoom(() => sink.admission(), config.queueFullWaitMs, config.queueFullWaitMaxBytes);
    metrics.setWaitingSource(() => this.waiting.size);
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
    if (!isJsonContentType(contentType)) return this.answer(x, this.answers.unsupportedType, true);
    const gzipped = contentEncoding === 'gzip' || contentEncoding === 'x-gzip';
    if (!gzipped && contentEncoding !== '' && contentEncoding !== 'identity') return this.answer(x, this.answers.unsupportedEncoding, true);
    if (contentLength !== '' && Number(contentLength) > this.maxBodyBytes) return this.answer(x, this.answers.tooLarge, true);
    const refusal = this.sink.admission();
    const waits = this.waiting.mayWait(refusal);
    if (refusal !== null && !waits) return this.answer(x, this.answers.refusals[refusal], false);
    return { gzipped, waits };
  }

  /** The body grew past MAX_BODY_BYTES while being read: refused, the rest of it unread. */
  tooLarge(x: TrackExchange): void {
    this.answer(x, this.answers.tooLarge, true);
  }

  /**
   * A whole body: taken, refused, or (the queue full) left to wait for room. `owned`: the body is not
   * uWS's memory (which it reuses after the callback), so it can be kept as it is.
   */
  take(x: TrackExchange, body: Uint8Array, owned: boolean, gzipped: boolean, waits: boolean): void {
    if (waits) return this.waitForRoom(x, body, owned, gzipped);
    const decoded = decodeTrackBody(body, gzipped, this.limits);
    if ('refused' in decoded) return void this.answer(x, refuse(decoded.refused, decoded.message, decoded.points, decoded.details), false);
    if (decoded.count === 0) return void this.answer(x, accepted(0), false);
    const taken = this.sink.accept(decoded);
    if (taken === null) this.answer(x, accepted(decoded.count), false);
    else if (typeof taken !== 'string') this.answerWhenAnswerable(x, taken, decoded.count);
    else if (taken === 'queue_full' && this.waiting.mayWait(taken)) this.waitForRoom(x, body, owned, gzipped);
    else this.answer(x, this.answers.refused(taken, decoded.count, decoded.largestValue), false);
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
