// The HTTP edge of one worker: uWebSockets.js routes, body reading with limits, responses.
// POST /track's logic after the body is read lives in track-body.ts.
//
// Every worker listens on the same port; uWS sets SO_REUSEPORT, so the kernel spreads connections.
import uWS from 'uWebSockets.js';
import type { Config } from '../config.js';
import { errorAnswer, STATUS_LINE, type ErrorAnswer, type HttpStatus } from '../errors.js';
import { newTicket } from '../kafka/delivery-reports.js';
import type { Logger } from '../log.js';
import type { WorkerMetrics } from '../metrics.js';
import { GET_PATHS, TRACK_PATH, type GetPath } from '../routes.js';
import { deliveryFailed, handleTrackBody, refuse, refusalAnswer, type PointSink, type TrackLimits, type TrackOutcome } from './track-body.js';
import { WaitingRoom } from './waiting-room.js';

export interface ServerDeps {
  config: Config;
  log: Logger;
  metrics: WorkerMetrics;
  producer: PointSink & { readiness(): { ready: boolean; reason: string } };
  /** The Prometheus text of every worker (asked of the primary). */
  clusterMetrics(): Promise<string>;
  workerId: string;
  /** The OpenAPI document, served at /openapi.json. */
  openApiJson: string;
}

type RouteMetrics = ReturnType<WorkerMetrics['other']>;

const STOP_READING = true;
const KEEP_READING = false;

/**
 * uWebSockets.js closes a connection idle for this long (HTTP_IDLE_TIMEOUT_S, compiled into the
 * library, not configurable). A gateway's upstream keep-alive must close idle connections sooner, or
 * a request written just as the service closes one gets no answer (deploy/gateway, deploy/k8s).
 */
export const HTTP_IDLE_TIMEOUT_S = 10;
/**
 * When that close comes: uSockets counts socket timeouts in ticks of 4 s and arms one for
 * ceil(seconds / 4) ticks from the current tick, so a connection idle since just before a tick is
 * closed after 8 s, one idle since just after it after 12 s (a CI run measured 8.988 s). A gateway's
 * upstream keep-alive must be shorter than the earliest.
 */
const TIMER_TICK_S = 4;
export const HTTP_IDLE_CLOSE_S = {
  earliest: TIMER_TICK_S * (Math.ceil(HTTP_IDLE_TIMEOUT_S / TIMER_TICK_S) - 1),
  latest: TIMER_TICK_S * Math.ceil(HTTP_IDLE_TIMEOUT_S / TIMER_TICK_S),
} as const;

const JSON_TYPE = 'application/json';

// Status lines and constant header names and values as bytes, for every answer, POST /track's above
// all: uWS turns every string argument into UTF-8 (v8::String::Utf8Value) on each call, and takes a
// byte array as it is. A scratch uWS handler of POST /track's shape took 13.6-15.6 µs of CPU per request
// this way against 16.3-17.6 with strings (wrk, 1-point bodies, three rounds alternating).
const bytes = (text: string): Buffer => Buffer.from(text, 'latin1');
const STATUS_BYTES = Object.fromEntries(Object.entries(STATUS_LINE).map(([status, line]) => [status, bytes(line)])) as Record<HttpStatus, Buffer>;
const H_CONTENT_TYPE = bytes('content-type');
const H_CONTENT_ENCODING = bytes('content-encoding');
const H_CONTENT_LENGTH = bytes('content-length');
const H_RETRY_AFTER = bytes('retry-after');
const H_CONNECTION = bytes('connection');
/** The Retry-After of every 500 the service answers (track-body.ts), as bytes. */
const ONE_SECOND = bytes('1');
const JSON_TYPE_BYTES = bytes(JSON_TYPE);
const CLOSE = bytes('close');
const H_ALLOW = bytes('allow');
const TEXT_METRICS_TYPE = bytes('text/plain; version=0.0.4; charset=utf-8');
const TEXT_TYPE = bytes('text/plain');

const NOT_FOUND = errorAnswer('not_found', `no such path; POST ${TRACK_PATH} takes track points`);
const TRACK_METHOD = errorAnswer('method_not_allowed', `use POST for ${TRACK_PATH}`);
const GET_METHOD = errorAnswer('method_not_allowed', 'use GET for this path');
// Refused before the body is read; prebuilt, they cost nothing per request.
const UNSUPPORTED_TYPE = refuse('unsupported_media_type', 'Content-Type must be application/json');
const UNSUPPORTED_ENCODING = refuse('unsupported_media_type', 'Content-Encoding must be gzip or identity');
const READY = '{"status":"ready"}';

/** `application/json`, any case, parameters such as charset allowed; missing means JSON. */
function isJsonContentType(value: string): boolean {
  if (value === '' || value === JSON_TYPE) return true;
  const semi = value.indexOf(';');
  return (semi < 0 ? value : value.slice(0, semi)).trim().toLowerCase() === JSON_TYPE;
}

export class HttpServer {
  private readonly app: uWS.TemplatedApp;
  private readonly limits: TrackLimits;
  private readonly tally: WorkerMetrics['track']['tally'];
  private readonly tooLarge: TrackOutcome;
  /** Requests that found the producer queue full, waiting for room (waiting-room.ts). */
  private readonly waiting: WaitingRoom;
  private listenSocket: uWS.us_listen_socket | null = null;
  /** Requests whose body is still being read or that wait for room: shutdown waits for them. */
  private bodiesInFlight = 0;
  /** Accepted requests whose answer waits: for Kafka (ACK_MODE=delivered) or the disk (JOURNAL_SYNC=disk). */
  private awaitingDelivery = 0;
  /** Whether a 202 waits for a ticket to settle (see awaitingDelivery); otherwise it is answered at once. */
  private readonly answersLater: boolean;
  /** While shutting down, every response closes its connection so keep-alive clients move on. */
  private draining = false;

  constructor(private readonly deps: ServerDeps) {
    const { config } = deps;
    this.answersLater = config.ackMode === 'delivered' || config.journalSync === 'disk';
    this.limits = {
      maxBodyBytes: config.maxBodyBytes,
      maxPoints: config.maxPoints,
      brokers: config.brokers,
      topic: config.topic,
      brokerDownGraceMs: config.brokerDownGraceMs,
      queueFullWaitMs: config.queueFullWaitMs,
    };
    this.tooLarge = refuse('payload_too_large', `body is larger than ${config.maxBodyBytes} bytes (MAX_BODY_BYTES)`);
    this.waiting = new WaitingRoom(() => deps.producer.admission(), config.queueFullWaitMs, config.queueFullWaitMaxBytes);
    deps.metrics.setWaitingSource(() => this.waiting.size);
    const m = deps.metrics;
    this.tally = m.track.tally;
    const routeMetrics = Object.fromEntries(GET_PATHS.map((path) => [path, m.other(path)])) as Record<GetPath, RouteMetrics>;
    const other = m.other('other');
    // Which process answered: lets an operator (and the cluster test) see the kernel spread connections.
    const healthy = JSON.stringify({ status: 'ok', worker: deps.workerId, pid: process.pid });

    const get: Record<GetPath, (res: uWS.HttpResponse) => void> = {
      '/healthz': (res) => this.reply(res, 200, healthy, routeMetrics['/healthz']),
      '/readyz': (res) => {
        const r = this.deps.producer.readiness();
        this.reply(res, r.ready ? 200 : 503, r.ready ? READY : JSON.stringify({ status: 'not_ready', reason: r.reason }), routeMetrics['/readyz']);
      },
      '/metrics': (res) => this.onMetrics(res, routeMetrics['/metrics']),
      '/openapi.json': (res) => this.reply(res, 200, deps.openApiJson, routeMetrics['/openapi.json']),
    };
    this.app = uWS.App()
      .post(TRACK_PATH, (res, req) => this.onTrack(res, req))
      .any(TRACK_PATH, (res) => {
        m.track.tally.byStatus[405]++;
        this.replyError(res, TRACK_METHOD, null, 'POST');
      });
    for (const path of GET_PATHS) {
      this.app.get(path, get[path]).any(path, (res) => this.replyError(res, GET_METHOD, routeMetrics[path], 'GET'));
    }
    this.app.any('/*', (res) => this.replyError(res, NOT_FOUND, other));
  }

  listen(): Promise<void> {
    const { host, port } = this.deps.config.listen;
    return new Promise((resolve, reject) => {
      const done = (socket: uWS.us_listen_socket | false) => {
        if (socket === false) return reject(new Error(`cannot listen on ${host || '*'}:${port} (address in use or not available)`));
        this.listenSocket = socket;
        resolve();
      };
      if (host === '') this.app.listen(port, done);
      else this.app.listen(host, port, done);
    });
  }

  /** Stops accepting connections, then waits (at most timeoutMs) for bodies being read to finish. */
  async stop(timeoutMs: number): Promise<void> {
    this.draining = true;
    if (this.listenSocket !== null) uWS.us_listen_socket_close(this.listenSocket);
    this.listenSocket = null;
    await pollUntil(() => this.bodiesInFlight === 0, timeoutMs);
  }

  /** Waits (at most timeoutMs) until every accepted request whose answer waited has been answered. */
  async settled(timeoutMs: number): Promise<void> {
    await pollUntil(() => this.awaitingDelivery === 0, timeoutMs);
  }

  // ---- POST /track: the hot path ------------------------------------------------------------

  private onTrack(res: uWS.HttpResponse, req: uWS.HttpRequest): void {
    const started = performance.now();
    // Headers must be read now: uWS reuses `req` once this function returns.
    if (!isJsonContentType(req.getHeader(H_CONTENT_TYPE))) return this.finishTrack(res, started, UNSUPPORTED_TYPE, STOP_READING);
    const encoding = req.getHeader(H_CONTENT_ENCODING);
    const gzipped = encoding === 'gzip' || encoding === 'x-gzip';
    if (!gzipped && encoding !== '' && encoding !== 'identity') return this.finishTrack(res, started, UNSUPPORTED_ENCODING, STOP_READING);

    const max = this.limits.maxBodyBytes;
    const lengthHeader = req.getHeader(H_CONTENT_LENGTH);
    if (lengthHeader !== '' && Number(lengthHeader) > max) {
      // Refused before a byte of the body is read.
      return this.finishTrack(res, started, this.tooLarge, STOP_READING);
    }
    // At the broker's limit a worker refuses most requests: answered before the body is read, a
    // refusal costs no callback per chunk; uWS skips the body's bytes and the connection stays open.
    // A full queue is the exception: the body is read and the request waits for room (waiting-room.ts).
    const refusal = this.deps.producer.admission();
    const waits = this.waiting.mayWait(refusal);
    if (refusal !== null && !waits) return this.finishTrack(res, started, refusalAnswer(refusal, this.limits), KEEP_READING);

    // The body arrives in chunks that uWS owns and reuses after each callback: a single-chunk body
    // (the common case) is handled in place without a copy; longer bodies are copied as they come.
    let parts: Buffer[] | null = null;
    let received = 0;
    let done = false;
    let aborted = false;
    const isAborted = () => aborted;
    this.bodiesInFlight++;
    res.onAborted(() => {
      aborted = true;
      if (done) return;
      done = true;
      this.bodiesInFlight--;
    });
    res.onData((chunk, isLast) => {
      if (done) return;
      received += chunk.byteLength;
      if (received > max) {
        done = true;
        this.bodiesInFlight--;
        this.tally.bytes += received;
        this.finishTrack(res, started, this.tooLarge, STOP_READING);
        return;
      }
      if (!isLast) {
        (parts ??= []).push(Buffer.copyBytesFrom(new Uint8Array(chunk)));
        return;
      }
      done = true;
      this.bodiesInFlight--;
      let body: Uint8Array;
      if (parts === null) body = new Uint8Array(chunk);
      else {
        parts.push(Buffer.copyBytesFrom(new Uint8Array(chunk)));
        body = Buffer.concat(parts, received);
      }
      this.tally.bytes += received;
      if (waits) this.waitForRoom(res, started, body, parts !== null, gzipped, isAborted);
      else this.onBody(res, started, body, parts !== null, gzipped, isAborted);
    });
  }

  /** A whole body: taken, refused, or (the queue full) left to wait for room. `owned`: not uWS's memory. */
  private onBody(res: uWS.HttpResponse, started: number, body: Uint8Array, owned: boolean, gzipped: boolean, isAborted: () => boolean): void {
    if (!this.answersLater) {
      const outcome = handleTrackBody(body, gzipped, this.limits, this.deps.producer);
      if (this.mayWait(outcome)) this.waitForRoom(res, started, body, owned, gzipped, isAborted);
      else this.finishTrack(res, started, outcome, KEEP_READING);
      return;
    }
    // ACK_MODE=delivered: answer once Kafka acknowledged (or failed) every point of the request;
    // JOURNAL_SYNC=disk: once its journal record is on the disk.
    let outcome: TrackOutcome | null = null;
    const ticket = newTicket((t) => {
      if (outcome === null || !outcome.awaitingDelivery) return; // already answered (produce failed midway)
      this.awaitingDelivery--;
      const answer = t.failed === 0 ? outcome : deliveryFailed(t, outcome.points);
      if (isAborted()) this.count(started, answer); // the client left; the points were still sent
      else this.finishTrack(res, started, answer, KEEP_READING);
    });
    outcome = handleTrackBody(body, gzipped, this.limits, this.deps.producer, ticket);
    if (outcome.awaitingDelivery) this.awaitingDelivery++;
    else if (this.mayWait(outcome)) this.waitForRoom(res, started, body, owned, gzipped, isAborted);
    else this.finishTrack(res, started, outcome, KEEP_READING);
  }

  /** A request read whole that did not fit in the queue (tryEnqueue) waits too, behind those already waiting. */
  private mayWait(outcome: TrackOutcome): boolean {
    return outcome.refusal === 'queue_full' && this.waiting.mayWait(outcome.refusal);
  }

  /**
   * The queue is full: the request waits (a copy of its body, uWS reusing its own) until the
   * waiting room lets it go on or refuses it. Nothing of it is taken meanwhile.
   */
  private waitForRoom(res: uWS.HttpResponse, started: number, body: Uint8Array, owned: boolean, gzipped: boolean, isAborted: () => boolean): void {
    const kept = owned ? body : Buffer.copyBytesFrom(body);
    this.bodiesInFlight++;
    const entered = this.waiting.enter({
      since: started,
      bytes: kept.byteLength,
      release: (refusal) => {
        this.bodiesInFlight--;
        if (isAborted()) return; // the client left while it waited: nothing was taken, nothing to answer
        if (refusal === null) this.onBody(res, started, kept, true, gzipped, isAborted);
        else this.finishTrack(res, started, refusalAnswer(refusal, this.limits), KEEP_READING);
      },
    });
    if (!entered) {
      this.bodiesInFlight--;
      this.finishTrack(res, started, refusalAnswer('queue_full', this.limits), KEEP_READING);
    }
  }

  private finishTrack(res: uWS.HttpResponse, started: number, outcome: TrackOutcome, stopReading: boolean): void {
    if (stopReading) {
      // The rest of the body is not wanted. Closing the socket now would make the kernel answer the
      // unread bytes with a TCP RST, which can destroy the response before the client reads it.
      // Instead: stop reading (the client's upload stalls once the socket buffers fill), answer with
      // Connection: close, and let the client hang up; uWS's idle timeout (HTTP_IDLE_TIMEOUT_S) closes it otherwise.
      res.pause();
    }
    res.cork(() => {
      res.writeStatus(STATUS_BYTES[outcome.status]).writeHeader(H_CONTENT_TYPE, JSON_TYPE_BYTES);
      if (outcome.retryAfter !== undefined) res.writeHeader(H_RETRY_AFTER, outcome.retryAfter === 1 ? ONE_SECOND : String(outcome.retryAfter));
      if (stopReading) res.writeHeader(H_CONNECTION, CLOSE);
      res.end(outcome.body, this.draining);
    });
    this.count(started, outcome);
  }

  private count(started: number, outcome: TrackOutcome): void {
    const { tally, duration, requestPoints } = this.deps.metrics.track;
    if (outcome.status === 202) {
      tally.points += outcome.points;
      if (outcome.points > 0) requestPoints.observe(outcome.points);
    } else if (outcome.reason !== undefined) {
      tally.rejected[outcome.reason] += outcome.points;
      tally.refused[outcome.reason]++;
    }
    tally.byStatus[outcome.status]++;
    duration.observe((performance.now() - started) / 1000);
  }

  // ---- the other routes ---------------------------------------------------------------------

  private reply(
    res: uWS.HttpResponse,
    status: HttpStatus,
    body: string,
    route: RouteMetrics | null,
    allow?: string,
  ): void {
    res.writeStatus(STATUS_BYTES[status]).writeHeader(H_CONTENT_TYPE, JSON_TYPE_BYTES);
    if (allow !== undefined) res.writeHeader(H_ALLOW, allow);
    res.end(body, this.draining);
    route?.requests[status].inc();
  }

  private replyError(res: uWS.HttpResponse, answer: ErrorAnswer, route: RouteMetrics | null, allow?: string): void {
    this.reply(res, answer.status, answer.body, route, allow);
  }

  private onMetrics(res: uWS.HttpResponse, route: RouteMetrics): void {
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
    });
    this.deps.clusterMetrics().then(
      (text) => {
        if (aborted) return;
        res.cork(() => {
          res.writeStatus(STATUS_BYTES[200]).writeHeader(H_CONTENT_TYPE, TEXT_METRICS_TYPE).end(text, this.draining);
        });
        route.requests[200].inc();
      },
      (err: unknown) => {
        this.deps.log.warn({ err }, 'collecting cluster metrics failed');
        if (aborted) return;
        res.cork(() => {
          res.writeStatus(STATUS_BYTES[503]).writeHeader(H_CONTENT_TYPE, TEXT_TYPE).end(`metrics unavailable: ${String(err)}\n`);
        });
        route.requests[503].inc();
      },
    );
  }
}

/** Shutdown only: checks `done` every 10 ms until it holds or timeoutMs have passed. */
async function pollUntil(done: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
}
