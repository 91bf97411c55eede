// Starts the built service (dist/src/main.js) as a real process tree, primary and workers, on a free
// port, the way `make run` does; the tests talk to it over HTTP and stop it when they are done.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'node:http';
import { fileURLToPath } from 'node:url';
import { BROKERS } from '../../support/kafka.js';
import { freePort } from '../../support/ports.js';
import { collectLines } from '../../support/lines.js';

const MAIN = fileURLToPath(new URL('../../dist/src/main.js', import.meta.url));
const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const p of running) p.kill('SIGKILL');
});

/**
 * Stops the services a test file left running (a failed assertion before its stop()): SIGTERM, then
 * SIGKILL after 10 s. Run after every test file (test/setup.ts), so that a failure does not leave a
 * service, its workers and their producers behind.
 */
export async function stopLeftoverServices(): Promise<void> {
  await Promise.all(
    [...running].map(
      (p) =>
        new Promise<void>((resolve) => {
          if (p.exitCode !== null || p.signalCode !== null) return resolve();
          const timer = setTimeout(() => p.kill('SIGKILL'), 10_000);
          p.once('exit', () => {
            clearTimeout(timer);
            resolve();
          });
          p.kill('SIGTERM');
        }),
    ),
  );
}

/** A fresh, empty journal directory. */
export function journalDir(): string {
  return mkdtempSync(join(tmpdir(), 'ingest-journal-'));
}

export interface Service {
  url: string;
  port: number;
  proc: ChildProcess;
  /** Every line the processes wrote (JSON logs), for assertions and for failure messages. */
  output: string[];
  exited: Promise<number | null>;
  /** Sends the signal and waits for the primary to exit; returns its exit code. */
  stop(signal?: NodeJS.Signals, timeoutMs?: number): Promise<number | null>;
}

export interface StartOptions {
  /** Wait for /readyz 200 (default) or only /healthz 200. */
  waitFor?: 'ready' | 'healthy' | 'nothing';
  timeoutMs?: number;
  /**
   * In a process group of its own (its pid is the group's id): the whole service, primary and
   * workers, can then be killed at once (`process.kill(-pid, 'SIGKILL')`), as a crashed pod is.
   */
  ownProcessGroup?: boolean;
  /** Node options before the service's entry (e.g. `--import` of a test fixture); the workers are forked with them too. */
  nodeArgs?: string[];
}

export async function startService(env: Record<string, string>, opts: StartOptions = {}): Promise<Service> {
  const port = env.LISTEN_ADDR === undefined ? await freePort() : Number(env.LISTEN_ADDR.split(':').pop());
  const proc = spawn(process.execPath, [...(opts.nodeArgs ?? []), MAIN], {
    // A journal directory of its own unless the test gives one (to restart a service on the same journal).
    env: { ...process.env, MQ_BROKERS: BROKERS, LISTEN_ADDR: `127.0.0.1:${port}`, WORKERS: '1', LOG_LEVEL: 'info', JOURNAL_DIR: journalDir(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: opts.ownProcessGroup ?? false,
  });
  running.add(proc);
  const output: string[] = [];
  collectLines(proc.stdout!, output);
  collectLines(proc.stderr!, output);
  const exited = new Promise<number | null>((resolve) =>
    proc.once('exit', (code) => {
      running.delete(proc);
      resolve(code);
    }),
  );
  const drained = new Promise<void>((resolve) => proc.once('close', () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  const service: Service = {
    url,
    port,
    proc,
    output,
    exited,
    async stop(signal = 'SIGTERM', timeoutMs = 30_000) {
      if (proc.exitCode !== null) return proc.exitCode;
      proc.kill(signal);
      const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(timer);
      // A failed orderly stop says why in the test's output (the worker's warnings and errors). 'exit'
      // can come before the last lines are read from the pipes: wait for them (a second at most; an
      // orphaned worker would hold the pipes open).
      if (signal === 'SIGTERM' && code !== null && code !== 0) {
        await Promise.race([drained, new Promise((r) => setTimeout(r, 1_000))]);
        console.log(`service exited ${code} on SIGTERM; its warnings and errors:\n${warningsOf(output)}`);
      }
      return code;
    },
  };
  const waitFor = opts.waitFor ?? 'ready';
  if (waitFor === 'nothing') return service;
  const path = waitFor === 'ready' ? '/readyz' : '/healthz';
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
  let exitCode: number | null | undefined;
  void exited.then((c) => (exitCode = c));
  while (Date.now() < deadline) {
    if (exitCode !== undefined) throw new Error(`service exited with ${exitCode} during start:\n${output.join('\n')}`);
    try {
      const res = await fetch(url + path);
      if (res.status === 200) return service;
    } catch {
      /* not listening yet */
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  await service.stop('SIGKILL');
  throw new Error(`service not ${waitFor} within ${opts.timeoutMs ?? 30_000} ms:\n${output.join('\n')}`);
}

export const point = (containerId: string, over: Record<string, unknown> = {}) => ({
  container_id: containerId,
  lat: 51.9,
  lon: 4.4,
  timestamp: '2024-05-01T12:00:00Z',
  ...over,
});

export async function postTrack(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${url}/track`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, json: (await res.json()) as Record<string, unknown> };
}

/**
 * POST /track on a fresh connection (no keep-alive): the kernel picks a worker anew, and no pooled
 * connection can point at a worker that a test has just killed.
 */
export function postFresh(url: string, body: unknown): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/track`, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

/** The service's log lines where a producer changed what it accepts, or saw a broker fall silent or answer again. */
export function producerStateLines(output: readonly string[]): string {
  return output.filter((l) => /producer state changed|answer again|answered nothing/.test(l)).join('\n');
}

/** Each change of a worker's producer to this state (its log lines), in the order logged. */
export function producerStateChanges(output: readonly string[], to: string): { worker: string; time: number }[] {
  const needle = `"to":"${to}"`;
  return output.filter((l) => l.includes(needle)).map((l) => JSON.parse(l) as { worker: string; time: number });
}

/** A status and its body: a failed expectation on answers then shows why they were refused. */
export interface Answer {
  status: number;
  body: string;
}

/** The value of one series in Prometheus text (the first line that names exactly it). */
export function metricValue(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** One series from the service's /metrics (all workers, aggregated by the primary). */
export async function metric(url: string, series: string): Promise<number | undefined> {
  return metricValue(await (await fetch(`${url}/metrics`)).text(), series);
}

/** The service's lines above info level (warnings, errors, fatal) and what is not a JSON log line (stderr). */
export function warningsOf(output: readonly string[]): string {
  return output.filter((l) => !/^\{"level":[123]0,/.test(l)).join('\n');
}

/**
 * Waits until every worker's journal is empty: each record produced (or committed) whole. On a
 * timeout, the error says what the journals and librdkafka's queue still held, and what the service
 * warned of meanwhile (a failure in CI has nothing else to go by).
 */
export async function untilJournalEmpty(svc: Service, what: string, timeoutMs = 60_000): Promise<number> {
  try {
    return await until(what, async () => (await metric(svc.url, 'ingest_journal_records')) === 0, timeoutMs);
  } catch (err) {
    // The service may be gone (a crash): what it wrote still says why.
    const text = await fetch(`${svc.url}/metrics`)
      .then((r) => r.text())
      .catch(() => '(no answer from /metrics)');
    const held = text.split('\n').filter((l) => /^ingest_(journal_records|journal_bytes|producer_queue_points|transactions_total)\b/.test(l));
    // No such line: /metrics did not answer with them (a worker that does not answer the primary); say what it did answer.
    if (held.length === 0) held.push(`/metrics answered: ${text.slice(0, 300)}`);
    throw new Error(`${(err as Error).message}\n${held.join('\n')}\nthe service's warnings and errors:\n${warningsOf(svc.output)}`, { cause: err });
  }
}

/** Polls fn until it says true; returns how long that took, or throws naming what it waited for. */
export async function until(what: string, fn: () => Promise<boolean>, timeoutMs = 30_000): Promise<number> {
  const start = Date.now();
  while (Date.now() - start < timeoutMs) {
    if (await fn().catch(() => false)) return Date.now() - start;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}
