// vegeta (github.com/tsenart/vegeta), an open-loop load generator nobody here wrote: a constant rate
// whatever the latency, opening connections as answers slow down. Built once by scripts/need-vegeta.sh.
import { execFileSync, spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from '../../support/repo-root.js';
import { cpuSeconds, timeWaitSockets } from './procfs.js';

const NEED_VEGETA = `${REPO_ROOT}scripts/need-vegeta.sh`;

/** vegeta's binary, built from the Go module proxy the first time. */
export function vegetaPath(): string {
  return execFileSync('bash', [NEED_VEGETA], { stdio: ['ignore', 'pipe', 'inherit'] })
    .toString()
    .trim();
}

/** `vegeta report -type=json`, with p99.9 added from the raw results (latencies in ns). */
export interface VegetaReport {
  requests: number;
  /** Requests sent per second, and successful (2xx) answers per second. */
  rate: number;
  throughput: number;
  latencies: { mean: number; '50th': number; '90th': number; '99th': number; '99.9th': number; max: number };
  status_codes: Record<string, number>;
  errors: string[] | null;
}

export interface AttackOptions {
  url: string;
  bodyFile: string;
  headers: Record<string, string>;
  rate: number;
  seconds: number;
  /** vegeta's -max-workers (its default: unbounded, a new connection whenever all are busy). */
  maxWorkers?: number;
  /** Where the raw results are written (and overwritten by the next attack). */
  dir: string;
  /**
   * A header whose value differs on every request (`<prefix>-<n>`), e.g. an Idempotency-Key: the
   * attack then reads one target per request from a file written here (vegeta -lazy).
   */
  uniqueHeader?: { name: string; prefix: string };
}

/**
 * Sockets in TIME_WAIT above which an attack waits first: the tests and benchmarks before it can leave
 * most of the ephemeral ports (32768–60999) in TIME_WAIT for 60 s, and vegeta, opening connections as
 * answers slow, then ran out of them (10000×1 read a p50 of 1.5 s, bench/HISTORY.md 2026-11-28).
 */
const TIME_WAIT_MAX = 14_000; // half the ephemeral range
const TIME_WAIT_WAIT_MS = 70_000;

async function portsFree(): Promise<void> {
  const first = timeWaitSockets();
  if (first <= TIME_WAIT_MAX) return;
  process.stderr.write(
    `vegeta: ${first} sockets in TIME_WAIT (over ${TIME_WAIT_MAX}); waiting up to ${TIME_WAIT_WAIT_MS / 1000} s for the ports to come back\n`,
  );
  const deadline = Date.now() + TIME_WAIT_WAIT_MS;
  while (timeWaitSockets() > TIME_WAIT_MAX && Date.now() < deadline) await new Promise((r) => setTimeout(r, 1_000));
}

/** One constant-rate POST attack; its report and vegeta's own CPU seconds (sampled until it ends). */
export async function vegetaAttack(vegeta: string, o: AttackOptions): Promise<{ report: VegetaReport; cpuSeconds: number }> {
  await portsFree();
  const results = join(o.dir, 'results.bin');
  const headers = Object.entries({ 'Content-Type': 'application/json', ...o.headers }).flatMap(([k, v]) => ['-header', `${k}: ${v}`]);
  let targets: string[] = [];
  if (o.uniqueHeader !== undefined) {
    // vegeta's JSON targets, the body inline: its http format reads an @body file again for every target.
    const file = join(o.dir, 'targets.json');
    const n = Math.ceil(o.rate * o.seconds * 1.05) + 100;
    const { name, prefix } = o.uniqueHeader;
    const body = readFileSync(o.bodyFile).toString('base64');
    writeFileSync(
      file,
      Array.from({ length: n }, (_, i) => JSON.stringify({ method: 'POST', url: `${o.url}/track`, header: { [name]: [`${prefix}-${i}`] }, body })).join('\n'),
    );
    targets = ['-lazy', '-format=json', `-targets=${file}`];
  }
  const proc = spawn(
    vegeta,
    [
      'attack',
      `-rate=${o.rate}/1s`,
      `-duration=${o.seconds}s`,
      ...(targets.length > 0 ? targets : [`-body=${o.bodyFile}`]),
      ...(o.maxWorkers === undefined ? [] : [`-max-workers=${o.maxWorkers}`]),
      ...headers,
      `-output=${results}`,
    ],
    {
      stdio: ['pipe', 'ignore', 'inherit'],
    },
  );
  proc.stdin.end(targets.length > 0 ? '' : `POST ${o.url}/track\n`);
  let cpu = 0;
  const sample = setInterval(() => (cpu = Math.max(cpu, cpuSeconds([proc.pid!]))), 200);
  const code = await new Promise<number | null>((resolve) => proc.once('exit', resolve));
  clearInterval(sample);
  if (code !== 0) throw new Error(`vegeta attack exited with ${code}`);
  const report = JSON.parse(execFileSync(vegeta, ['report', '-type=json', results]).toString()) as VegetaReport;
  // p99.9 from the raw latencies (vegeta's JSON report stops at p99): CSV, the third column in ns.
  const latencies = execFileSync(vegeta, ['encode', '-to=csv', results], { maxBuffer: 1 << 30 })
    .toString()
    .split('\n')
    .filter(Boolean)
    .map((line) => Number(line.split(',')[2]))
    .sort((a, b) => a - b);
  report.latencies['99.9th'] = latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * 0.999))] ?? 0;
  return { report, cpuSeconds: cpu };
}
