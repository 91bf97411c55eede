// POST /track, from its headers to its answer, in one place and without uWebSockets.js: server.ts
// adapts it (routes, reading the body, corking, aborts), track-body.ts turns a body into messages.
//
//   headers ─admit()─┬─▶ refused at once, before a byte of the body is read: 415 (Content-Type or
//                    │   Content-Encoding), 413 (Content-Length), 500 (the producer takes nothing
//                    │   now: its code, queue_full only when the request may not wait)
//                    ▼
//   body, read by server.ts (over MAX_BODY_BYTES while reading: tooLarge())
//                    ▼
//   take() ── track-body.ts: gunzip ▶ single pass, or UTF-8 + JSON.parse + zod ▶ encode ▶ tryEnqueue
//      │         400 / 413 / 415 answered at once                                         │
//      │                           taken: 202 at once, or once Kafka has every point (ACK_MODE=delivered)
//      │                           or the journal record is on the disk (JOURNAL_SYNC=disk)
//      └─ the producer queue full: the waiting room keeps the body and takes it again, oldest first,
//         as room appears; 500 queue_full after QUEUE_FULL_WAIT_MS
//
// Every answer goes out through its exchange's answer() and is counted here, once.
import type { Config } from '../config.js';
import type { ProducerRefusal } from '../api/errors.js';
import { newTicket } from '../kafka/delivery-reports.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import { deliveryFailed, handleTrackBody, refuse, refusalAnswers, type PointSink, type TrackLimits, type TrackOutcome } from './track-body.js';
import { WaitingRoom } from './waiting-room.js';

/** One POST /track as the HTTP edge holds it. */
export interface TrackExchange {
  /** performance.now() when the request came: its duration and its wait count from there. */
  readonly started: number;
  /** The client left (its connection closed): nothing to answer. */
  aborted(): boolean;
  /** Writes the answer. stopReading: the rest of the body is not wanted (the connection closes). */
  answer(outcome: TrackOutcome, stopReading: boolean): void;
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
  private readonly limits: TrackLimits;
  private readonly waiting: WaitingRoom;
  /** Whether a 202 waits for a ticket (Kafka, or the disk) to settle; otherwise it is answered at once. */
  private readonly answersLater: boolean;
  /** Accepted requests whose answer waits for their ticket. */
  private awaiting = 0;
  // Answers made once: most refusals under overload are one of these.
  private readonly unsupportedType = refuse('unsupported_media_type', 'Content-Type must be application/json');
  private readonly unsupportedEncoding = refuse('unsupported_media_type', 'Content-Encoding must be gzip or identity');
  private readonly tooLargeAnswer: TrackOutcome;
  private readonly refusals: Readonly<Record<ProducerRefusal, TrackOutcome>>;

  constructor(
    config: Config,
    private readonly producer: PointSink,
    private readonly metrics: WorkerMetrics,
  ) {
    this.maxBodyBytes = config.maxBodyBytes;
    this.answersLater = config.ackMode === 'delivered' || config.journalSync === 'disk';
    this.refusals = refusalAnswers({ brokers: config.brokers, topic: config.topic, brokerDownGraceMs: config.brokerDownGraceMs, queueFullWaitMs: config.queueFullWaitMs });
    this.limits = { maxBodyBytes: config.maxBodyBytes, maxPoints: config.maxPoints, refusals: this.refusals };
    this.tooLargeAnswer = refuse('payload_too_large', `body is larger than ${config.maxBodyBytes} bytes (MAX_BODY_BYTES)`);
    this.waiting = new WaitingRoom(() => producer.admission(), config.queueFullWaitMs, config.queueFullWaitMaxBytes);
    metrics.setWaitingSource(() => this.waiting.size);
  }

  /** Requests whose body is kept in the waiting room, and accepted ones whose answer waits: shutdown waits for them. */
  get waitingForRoom(): number {
    return this.waiting.size;
  }

  get awaitingAnswer(): number {
    return this.awaiting;
  }

  /**
   * The one admission decision, from the headers: null when the request was answered (refused), else
   * how to take its body. Under overload a worker refuses most requests:
   * answered before the body is read, a refusal costs no callback per chunk, and uWS skips the
   * body's bytes with the connection kept open. A full queue is the exception: the body is read and
   * the request waits for room.
   */
  admit(x: TrackExchange, contentType: string, contentEncoding: string, contentLength: string): Admitted | null {
    if (!isJsonContentType(contentType)) return this.answer(x, this.unsupportedType, true);
    const gzipped = contentEncoding === 'gzip' || contentEncoding === 'x-gzip';
    if (!gzipped && contentEncoding !== '' && contentEncoding !== 'identity') return this.answer(x, this.unsupportedEncoding, true);
    if (contentLength !== '' && Number(contentLength) > this.maxBodyBytes) return this.answer(x, this.tooLargeAnswer, true);
    const refusal = this.producer.admission();
    const waits = this.waiting.mayWait(refusal);
    if (refusal !== null && !waits) return this.answer(x, this.refusals[refusal], false);
    return { gzipped, waits };
  }

  /** The body grew past MAX_BODY_BYTES while being read: refused, the rest of it unread. */
  tooLarge(x: TrackExchange): void {
    this.answer(x, this.tooLargeAnswer, true);
  }

  /**
   * A whole body: taken, refused, or (the queue full) left to wait for room. `owned`: the body is not
   * uWS's memory (which it reuses after the callback), so it can be kept as it is.
   */
  take(x: TrackExchange, body: Uint8Array, owned: boolean, gzipped: boolean, waits: boolean): void {
    if (waits) return this.waitForRoom(x, body, owned, gzipped);
    if (!this.answersLater) {
      const outcome = handleTrackBody(body, gzipped, this.limits, this.producer);
      if (this.mayWait(outcome)) this.waitForRoom(x, body, owned, gzipped);
      else this.answer(x, outcome, false);
      return;
    }
    // ACK_MODE=delivered: answered once Kafka acknowledged (or failed) every point of the request;
    // JOURNAL_SYNC=disk: once its journal record is on the disk.
    let outcome: TrackOutcome | null = null;
    const ticket = newTicket((t) => {
      if (outcome === null || !outcome.awaitingDelivery) return; // answered already (produce failed midway)
      this.awaiting--;
      this.answer(x, t.failed === 0 ? outcome : deliveryFailed(t, outcome.points), false);
    });
    outcome = handleTrackBody(body, gzipped, this.limits, this.producer, ticket);
    if (outcome.awaitingDelivery) this.awaiting++;
    else if (this.mayWait(outcome)) this.waitForRoom(x, body, owned, gzipped);
    else this.answer(x, outcome, false);
  }

  /** A request read whole that did not fit in the queue waits too, behind those already waiting. */
  private mayWait(outcome: TrackOutcome): boolean {
    return outcome.refusal === 'queue_full' && this.waiting.mayWait(outcome.refusal);
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
        else this.answer(x, this.refusals[refusal], false);
      },
    });
    if (!entered) this.answer(x, this.refusals.queue_full, false);
  }

  /** Counts the answer, then writes it unless the client left. */
  private answer(x: TrackExchange, outcome: TrackOutcome, stopReading: boolean): null {
    const { tally, duration, requestPoints } = this.metrics.track;
    if (outcome.status === 202) {
      tally.points += outcome.points;
      if (outcome.points > 0) requestPoints.observe(outcome.points);
    } else if (outcome.reason !== undefined) {
      tally.rejected[outcome.reason] += outcome.points;
      tally.refused[outcome.reason]++;
    }
    tally.byStatus[outcome.status]++;
    duration.observe((performance.now() - x.started) / 1000);
    // The client left while Kafka or the disk answered: the points were still taken, and counted.
    if (!x.aborted()) x.answer(outcome, stopReading);
    return null;
  }
}
