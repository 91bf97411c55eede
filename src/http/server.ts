// The HTTP edge of one worker: uWebSockets.js adapted to the service. Routes, reading a body in
// chunks with its limit, aborts, corked answers; POST /track itself is track-handler.ts, the other
// routes are answered here.
//
// Every worker listens on the same port; uWS sets SO_REUSEPORT, so the kernel spreads connections.
import type uWS from 'uWebSockets.js';
import type { Config } from '../config.js';
import { errorAnswer, STATUS_LINE, type ErrorAnswer, type HttpStatus } from '../api/errors.js';
import type { Logger } from '../log.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import { GET_PATHS, TRACK_PATH, type GetPath } from '../api/routes.js';
import type { FramingSource } from '../track-point/registry-encode.js';
import type { PointSink } from '../write-ahead/acceptance.js';
import type { TrackAnswer } from './track-answers.js';
import type { RequestClient } from '../refused/refused-requests.js';
import { TrackHandler, type RefusedKeeper, type TrackExchange } from './track-handler.js';
import { uwsBuild, type UWS } from './uws.js';

export interface ServerDeps {
  config: Config;
  log: Logger;
  metrics: WorkerMetrics;
  /** What takes the points: the delivery mode's sink (write-ahead/delivery-mode.ts). */
  sink: PointSink;
  /** The Prometheus text of every worker (asked of the primary). */
  clusterMetrics(): Promise<string>;
  workerId: string;
  /** The OpenAPI document, served at /openapi.json. */
  openApiJson: string;
  /** Where requests refused for their content are kept (MQ_REFUSED_TOPIC), or null. */
  refused: RefusedKeeper | null;
  /** The values' registry framing (MQ_VALUE_FORMAT), absent for JSON. */
  values?: FramingSource;
}

type RouteMetrics = ReturnType<WorkerMetrics['other']>;

const JSON_TYPE = 'application/json';

// Status lines and constant header names and values as bytes, for every answer, POST /track's above
// all: uWS turns every string argument into UTF-8 (v8::String::Utf8Value) on each call, and takes a
// byte array as it is, which saves a conversion per header on every answer.
const bytes = (text: string): Buffer => Buffer.from(text, 'latin1');
const STATUS_BYTES = Object.fromEntries(Object.entries(STATUS_LINE).map(([status, line]) => [status, bytes(line)])) as Record<HttpStatus, Buffer>;
const H_CONTENT_TYPE = bytes('content-type');
const H_CONTENT_ENCODING = bytes('content-encoding');
const H_CONTENT_LENGTH = bytes('content-length');
const H_RETRY_AFTER = bytes('retry-after');
const H_CONNECTION = bytes('connection');
const H_FORWARDED_FOR = bytes('x-forwarded-for');
const H_API_KEY_NAME = bytes('x-api-key-name');
/** The Retry-After of every 500 the service answers (track-answers.ts), as bytes. */
const ONE_SECOND = bytes('1');
const JSON_TYPE_BYTES = bytes(JSON_TYPE);
const CLOSE = bytes('close');
const H_ALLOW = bytes('allow');
const TEXT_METRICS_TYPE = bytes('text/plain; version=0.0.4; charset=utf-8');
const TEXT_TYPE = bytes('text/plain');

const NOT_FOUND = errorAnswer('not_found', `no such path; POST ${TRACK_PATH} takes track points`);
const TRACK_METHOD = errorAnswer('method_not_allowed', `use POST for ${TRACK_PATH}`);
const GET_METHOD = errorAnswer('method_not_allowed', 'use GET for this path');
const READY = '{"status":"ready"}';

export class HttpServer {
  private readonly uws: UWS = uwsBuild().uws;
  private readonly app: uWS.TemplatedApp;
  private readonly track: TrackHandler;
  private readonly tally: WorkerMetrics['track']['tally'];
  private listenSocket: uWS.us_listen_socket | null = null;
  /** POST /track bodies being read: shutdown waits for them (and for those the handler keeps). */
  private bodiesReading = 0;
  /** While shutting down, every response closes its connection so keep-alive clients move on. */
  private draining = false;
  /** Refusals are kept (MQ_REFUSED_TOPIC): a request's client may be asked for. */
  private readonly keepsRefused: boolean;
  /** X-Forwarded-For and X-Api-Key-Name are read: refusals are kept and the gateway is trusted. */
  private readonly readsGatewayHeaders: boolean;

  constructor(private readonly deps: ServerDeps) {
    this.track = new TrackHandler(deps.config, deps.sink, deps.metrics, deps.refused, deps.values);
    this.keepsRefused = deps.refused !== null;
    this.readsGatewayHeaders = this.keepsRefused && deps.config.trustGatewayHeaders;
    const m = deps.metrics;
    this.tally = m.track.tally;
    const routeMetrics = Object.fromEntries(GET_PATHS.map((path) => [path, m.other(path)])) as Record<GetPath, RouteMetrics>;
    const other = m.other('other');
    // Which process answered: lets an operator (and the cluster test) see the kernel spread connections.
    const healthy = JSON.stringify({ status: 'ok', worker: deps.workerId, pid: process.pid });

    const get: Record<GetPath, (res: uWS.HttpResponse) => void> = {
      '/healthz': (res) => this.reply(res, 200, healthy, routeMetrics['/healthz']),
      '/readyz': (res) => {
        const r = this.deps.sink.readiness();
        this.reply(res, r.ready ? 200 : 503, r.ready ? READY : JSON.stringify({ status: 'not_ready', reason: r.reason }), routeMetrics['/readyz']);
      },
      '/metrics': (res) => this.onMetrics(res, routeMetrics['/metrics']),
      '/openapi.json': (res) => this.reply(res, 200, deps.openApiJson, routeMetrics['/openapi.json']),
    };
    this.app = this.uws
      .App()
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

  /** Stops accepting connections, then waits (at most timeoutMs) for bodies being read or waiting for room. */
  async stop(timeoutMs: number): Promise<void> {
    this.draining = true;
    if (this.listenSocket !== null) this.uws.us_listen_socket_close(this.listenSocket);
    this.listenSocket = null;
    await pollUntil(() => this.bodiesReading === 0 && this.track.waitingForRoom === 0, timeoutMs);
  }

  /** Waits (at most timeoutMs) until every accepted request whose answer waited has been answered. */
  async settled(timeoutMs: number): Promise<void> {
    await pollUntil(() => this.track.awaitingAnswer === 0, timeoutMs);
  }

  // ---- POST /track: the hot path ------------------------------------------------------------

  private onTrack(res: uWS.HttpResponse, req: uWS.HttpRequest): void {
    let aborted = false;
    // Only when refusals are kept and the gateway trusted: two header lookups a request otherwise saved.
    const forwardedFor = this.readsGatewayHeaders ? req.getHeader(H_FORWARDED_FOR) : '';
    const apiKeyName = this.readsGatewayHeaders ? req.getHeader(H_API_KEY_NAME) : '';
    const x: TrackExchange = {
      started: performance.now(),
      aborted: () => aborted,
      answer: (outcome, stopReading) => this.finishTrack(res, outcome, stopReading),
      // Asked only when a refusal is kept: without MQ_REFUSED_TOPIC, no closure a request.
      client: this.keepsRefused ? () => requestClient(res, aborted, forwardedFor, apiKeyName) : NO_CLIENT,
    };
    // Headers must be read now: uWS reuses `req` once this function returns.
    const admitted = this.track.admit(x, req.getHeader(H_CONTENT_TYPE), req.getHeader(H_CONTENT_ENCODING), req.getHeader(H_CONTENT_LENGTH));
    if (admitted === null) return; // answered: refused from its headers
    const { gzipped, waits } = admitted;

    // The body arrives in chunks that uWS owns and reuses after each callback: a single-chunk body
    // (the common case) is handled in place without a copy; longer bodies are copied as they come.
    const max = this.track.maxBodyBytes;
    let parts: Buffer[] | null = null;
    let received = 0;
    let done = false;
    this.bodiesReading++;
    res.onAborted(() => {
      aborted = true;
      if (done) return;
      done = true;
      this.bodiesReading--;
    });
    res.onData((chunk, isLast) => {
      if (done) return;
      received += chunk.byteLength;
      if (received > max) {
        done = true;
        this.bodiesReading--;
        this.tally.bytes += received;
        // What was read, gathered only when the refusal is kept (the chunk is valid during this call).
        this.track.tooLarge(x, gzipped, () => Buffer.concat([...(parts ?? []), new Uint8Array(chunk)]));
        return;
      }
      if (!isLast) {
        (parts ??= []).push(Buffer.copyBytesFrom(new Uint8Array(chunk)));
        return;
      }
      done = true;
      this.bodiesReading--;
      let body: Uint8Array;
      if (parts === null) body = new Uint8Array(chunk);
      else {
        parts.push(Buffer.copyBytesFrom(new Uint8Array(chunk)));
        body = Buffer.concat(parts, received);
      }
      this.tally.bytes += received;
      this.track.take(x, body, parts !== null, gzipped, waits);
    });
  }

  /** Writes a POST /track answer (counted by the handler). */
  private finishTrack(res: uWS.HttpResponse, outcome: TrackAnswer, stopReading: boolean): void {
    if (stopReading) {
      // The rest of the body is not wanted. Closing the socket now would make the kernel answer the
      // unread bytes with a TCP RST, which can destroy the response before the client reads it.
      // Instead: stop reading (the client's upload stalls once the socket buffers fill), answer with
      // Connection: close, and let the client hang up; uWS's idle timeout (uws.ts, idleTimeoutS) closes it otherwise.
      res.pause();
    }
    res.cork(() => {
      res.writeStatus(STATUS_BYTES[outcome.status]).writeHeader(H_CONTENT_TYPE, JSON_TYPE_BYTES);
      if (outcome.retryAfter !== undefined) res.writeHeader(H_RETRY_AFTER, outcome.retryAfter === 1 ? ONE_SECOND : String(outcome.retryAfter));
      if (stopReading) res.writeHeader(H_CONNECTION, CLOSE);
      res.end(outcome.body, this.draining);
    });
  }

  // ---- the other routes ---------------------------------------------------------------------

  private reply(res: uWS.HttpResponse, status: HttpStatus, body: string, route: RouteMetrics | null, allow?: string): void {
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
          res
            .writeStatus(STATUS_BYTES[503])
            .writeHeader(H_CONTENT_TYPE, TEXT_TYPE)
            .end(`metrics unavailable: ${String(err)}\n`);
        });
        route.requests[503].inc();
      },
    );
  }
}

/** The client of every request while refusals are not kept (never asked then). */
const NO_CLIENT = (): RequestClient => ({ address: 'unknown', apiKeyName: null });

/**
 * Who sent a request: the last address of X-Forwarded-For (the one the gateway saw) when the gateway
 * is trusted and sent one, else the connection's peer.
 */
function requestClient(res: uWS.HttpResponse, aborted: boolean, forwardedFor: string, apiKeyName: string): RequestClient {
  const forwarded = forwardedFor.slice(forwardedFor.lastIndexOf(',') + 1).trim();
  // uWS forbids touching a response after its abort: the peer is then unknown.
  const address = forwarded !== '' ? forwarded : aborted ? 'unknown (the client left)' : Buffer.from(res.getRemoteAddressAsText()).toString('latin1');
  return { address, apiKeyName: apiKeyName === '' ? null : apiKeyName };
}

/** Shutdown only: checks `done` every 10 ms until it holds or timeoutMs have passed. */
async function pollUntil(done: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
}
