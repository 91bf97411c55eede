// An open-loop load generator for the fixed-rate (design load) scenarios: requests evenly spaced
// (rate/1000 per millisecond), not each second's quota at once.
//
// Why not autocannon's `overallRate` here: autocannon lets every connection send its per-second quota
// back to back as soon as a new second starts (httpClient.js, `reqsMadeThisSecond`), so 100 requests/s
// arrive as one burst per second, and it corrects coordinated omission with an expected interval of
// `Math.ceil(1 / rate)` = 1 ms, which adds a synthetic sample for every millisecond a response took
// beyond the first. Both make a fixed rate look like a saturation test. The suite still runs
// autocannon for the closed-loop scenarios, and `autocannon -R` as an extra design row for comparison.
//
// Latency is measured from the moment a request is written; when every connection is busy (the
// service is behind), from the moment the request was due instead, so that waiting for a connection
// counts (no coordinated omission). Runs in a worker thread so that the runner's own work does not
// delay it; its CPU time shows in the runner's process.cpuUsage().
//
// The next request goes to the connection idle the longest, so every connection sends at the same
// pace, as the devices of a fleet do. The most recently freed one instead (a stack) left the bottom
// of a pool larger than the requests in flight idle until the service closed it (10 s idle,
// idleTimeoutS in src/http/uws.ts): with 200 connections at 10,000 requests/s, 71 and 91
// closes in 20 s, and a request written just as its connection closed went unanswered, counted as
// the service's error (bench/HISTORY.md, 2026-11-26).
import { createHistogram } from 'node:perf_hooks';
import { connect, type Socket } from 'node:net';
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads';

export interface PacedOptions {
  url: string;
  path: string;
  body: string;
  /** Bodies sent in turn instead of `body` alone (traffic whose values differ from request to request). */
  bodies?: readonly string[];
  /** More request headers (an API key for the gateway). */
  headers?: Record<string, string>;
  /** A header whose value differs on every request (`<prefix>-<n>`), e.g. an Idempotency-Key. */
  uniqueHeader?: { name: string; prefix: string };
  connections: number;
  /** Requests per second, spread evenly. */
  rate: number;
  seconds: number;
}

export interface PacedResult {
  requests: number;
  ok2xx: number;
  non2xx: number;
  errors: number;
  /** Requests that waited for a free connection (the service was behind). */
  queued: number;
  latencyMs: { p50: number; p90: number; p99: number; p999: number; max: number };
}

export function pacedLoad(opts: PacedOptions): Promise<PacedResult> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL(import.meta.url), { workerData: opts });
    worker.once('message', resolve);
    worker.once('error', reject);
  });
}

/** Latencies are recorded in µs up to 60 s (longer ones count as 60 s). */
const HIGHEST_US = 60_000_000;

interface Conn {
  socket: Socket;
  busy: boolean;
  /** performance.now() the latency of the request in flight counts from. */
  origin: number;
  pending: string;
}

/** Where the first complete response in `text` ends, or -1 (Content-Length or chunked bodies). */
function responseEnd(text: string): number {
  const headerEnd = text.indexOf('\r\n\r\n');
  if (headerEnd < 0) return -1;
  const head = text.slice(0, headerEnd);
  let pos = headerEnd + 4;
  if (!/transfer-encoding: *chunked/i.test(head)) {
    const length = /content-length: *(\d+)/i.exec(head);
    const end = pos + (length === null ? 0 : Number(length[1]));
    return text.length >= end ? end : -1;
  }
  for (;;) {
    const lineEnd = text.indexOf('\r\n', pos);
    if (lineEnd < 0) return -1;
    const size = parseInt(text.slice(pos, lineEnd), 16);
    if (size === 0) return text.length >= lineEnd + 4 ? lineEnd + 4 : -1; // no trailers
    pos = lineEnd + 2 + size + 2;
    if (pos > text.length) return -1;
  }
}

/** The generator on the calling thread: pacedLoad runs it in a worker thread, a test on its own. */
export async function generate(opts: PacedOptions): Promise<PacedResult> {
  const { hostname, port } = new URL(opts.url);
  const extraHeaders = Object.entries(opts.headers ?? {})
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('');
  // Each request in two parts, the unique header (if any) written between them.
  const head = Buffer.from(`POST ${opts.path} HTTP/1.1\r\nHost: ${hostname}:${port}\r\nContent-Type: application/json\r\n${extraHeaders}`);
  const tails = (opts.bodies ?? [opts.body]).map((text) => {
    const body = Buffer.from(text);
    return Buffer.concat([Buffer.from(`Content-Length: ${body.length}\r\n\r\n`), body]);
  });
  const unique = opts.uniqueHeader;
  const requests = unique === undefined ? tails.map((tail) => Buffer.concat([head, tail])) : [];
  const request = (n: number): Buffer =>
    unique === undefined
      ? requests[n % requests.length]!
      : Buffer.concat([head, Buffer.from(`${unique.name}: ${unique.prefix}-${n}\r\n`, 'latin1'), tails[n % tails.length]!]);
  const histogram = createHistogram({ lowest: 1, highest: HIGHEST_US, figures: 3 }); // µs
  const result = { requests: 0, ok2xx: 0, non2xx: 0, errors: 0, queued: 0 };
  const all = new Set<Conn>();
  const idle: Conn[] = []; // oldest first
  const backlog: number[] = []; // due times of requests waiting for a connection
  let stopping = false;
  let inFlight = 0;

  const send = (conn: Conn, origin: number) => {
    conn.busy = true;
    conn.origin = origin;
    inFlight++;
    conn.socket.write(request(result.requests));
    result.requests++;
  };
  const release = (conn: Conn) => {
    conn.busy = false;
    inFlight--;
    const due = backlog.shift();
    if (due !== undefined && !stopping) send(conn, due);
    else idle.push(conn);
  };
  const open = (): Promise<void> =>
    new Promise((resolve, reject) => {
      const conn: Conn = { socket: connect({ host: hostname, port: Number(port), noDelay: true }), busy: false, origin: 0, pending: '' };
      conn.socket.setEncoding('latin1');
      let connected = false;
      conn.socket.once('connect', () => {
        connected = true;
        all.add(conn);
        idle.push(conn);
        resolve();
      });
      conn.socket.on('data', (chunk: string) => {
        conn.pending += chunk;
        // One response at a time per connection (no pipelining); the service's answers are small.
        const end = responseEnd(conn.pending);
        if (end < 0) return;
        const status = Number(conn.pending.slice(9, 12));
        conn.pending = conn.pending.slice(end);
        histogram.record(Math.min(HIGHEST_US, Math.max(1, Math.round((performance.now() - conn.origin) * 1000))));
        if (status >= 200 && status < 300) result.ok2xx++;
        else result.non2xx++;
        release(conn);
      });
      conn.socket.on('error', (err) => {
        if (!connected) reject(err);
      });
      conn.socket.on('close', () => {
        if (!connected) return;
        all.delete(conn);
        const i = idle.indexOf(conn);
        if (i >= 0) idle.splice(i, 1);
        if (conn.busy) {
          result.errors++; // a request without an answer
          inFlight--;
        }
        if (!stopping) void open().catch(() => result.errors++); // keep the pool at its size
      });
    });
  await Promise.all(Array.from({ length: opts.connections }, open));

  const start = performance.now();
  const total = Math.round(opts.rate * opts.seconds);
  let scheduled = 0;
  await new Promise<void>((done) => {
    const tick = () => {
      const now = performance.now();
      const due = Math.min(total, Math.floor(((now - start) / 1000) * opts.rate));
      for (; scheduled < due; scheduled++) {
        const conn = idle.shift();
        if (conn !== undefined) send(conn, now);
        else {
          result.queued++;
          backlog.push(start + (scheduled * 1000) / opts.rate);
        }
      }
      if (scheduled < total) setTimeout(tick, 1);
      else done();
    };
    tick();
  });
  // Answers still on their way, then close.
  const deadline = performance.now() + 5_000;
  while ((inFlight > 0 || backlog.length > 0) && performance.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  stopping = true;
  result.errors += backlog.length + inFlight; // never answered
  for (const conn of all) {
    conn.busy = false;
    conn.socket.destroy();
  }
  const ms = (p: number) => histogram.percentile(p) / 1000;
  return { ...result, latencyMs: { p50: ms(50), p90: ms(90), p99: ms(99), p999: ms(99.9), max: histogram.max / 1000 } };
}

if (!isMainThread && parentPort !== null) {
  parentPort.postMessage(await generate(workerData as PacedOptions));
}
