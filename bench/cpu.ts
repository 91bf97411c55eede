// `make bench-cpu`: the service's CPU per point under closed-loop load from wrk, one worker, in
// requests of 100, 10 and 1 points: the method of issue 11's table, so that its goals (≤ 2.0 µs per
// point at 100, ≤ 3.5 at 10, ≤ 14 per request at 1) are checked by a command, not quoted.
//
// First the broker is warmed up: CPU_BROKER_WARMUP_SECONDS (30) of 100-point requests, not measured (a
// cold broker moved the CPU per point by 30 %). Then for each shape and round: a fresh topic, the
// service started with WORKERS=1 (CPU_WORKERS), wrk for CPU_WARMUP_SECONDS (3) to warm it up and its points
// delivered, then wrk -c CPU_CONNECTIONS (32) for CPU_SECONDS (10); the
// CPU of the service's processes (the primary and its worker, every thread, librdkafka's included)
// read from /proc before and after, and split by thread: the worker's JavaScript thread, librdkafka's
// threads, the rest (bench/lib/procfs.ts, serviceThreadsCpu); then the topic is read back to check
// that every point answered 202 is in Kafka. Rounds: CPU_ROUNDS (2).
//
// CPU_RATE=N[,N…] offers N points per second instead (one rate per shape of CPU_BATCHES), evenly paced (bench/lib/paced-load.ts, 32 connections):
// closed-loop load drives a faster build into the broker's limit on a small machine (requests that
// wait for room, QUEUE_FULL_WAIT_MS; builds before it answered 500 queue_full), and CPU per point at
// the limit is not CPU per point below it; at one fixed rate both builds do the same work.
//
// CPU_BODIES=distinct (paced only) sends 500 bodies in turn whose points carry random 6-decimal
// coordinates, as real traffic does, instead of one body again and again (bench/lib/points.ts says why).
//
// Then the cost of a refusal: each build started with no broker reachable (MQ_BROKERS at a closed
// port), so that every request is answered 500 broker_unavailable, under wrk for CPU_REFUSED_SECONDS
// (5; 0 skips it) with the 100-point body. Whatever a worker refuses (a broker down; a queue full for
// longer than QUEUE_FULL_WAIT_MS), each refusal costs CPU the broker does not get.
//
// CPU_COMPARE=path/to/other/dist/src/main.js runs another build (an earlier commit's) side by side,
// alternating with this one in each round, against the same broker: the ratio holds for one run
// on one machine even where the absolute figures move with what else the machine does.
// CPU_COMPARE_NODE=path/to/node runs the compared build on another Node.js (one version against
// another, the same code: bench/README.md, "Node 24 against Node 20"). CPU_WORKERS: the service's
// WORKERS (1; 2 is the design-load shape on 2 cores).
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { BROKERS, createTopic, deleteTopic } from '../support/kafka.js';
import { freePort } from '../support/ports.js';
import { topicSize, waitForDelivery } from './lib/delivery.js';
import { pacedLoad } from './lib/paced-load.js';
import { cpuSeconds, processTree, serviceThreadsCpu } from './lib/procfs.js';
import { benchPoints } from './lib/points.js';
import { startTarget } from './lib/targets.js';

const env = process.env;
const SECONDS = Number(env.CPU_SECONDS ?? 10);
const WARMUP_SECONDS = Number(env.CPU_WARMUP_SECONDS ?? 3);
const CONNECTIONS = Number(env.CPU_CONNECTIONS ?? 32);
const ROUNDS = Number(env.CPU_ROUNDS ?? 2);
const REFUSED_SECONDS = Number(env.CPU_REFUSED_SECONDS ?? 5);
const BROKER_WARMUP_SECONDS = Number(env.CPU_BROKER_WARMUP_SECONDS ?? 30);
const SHAPES = (env.CPU_BATCHES ?? '100,10,1').split(',').map(Number);
const RATES = env.CPU_RATE === undefined ? null : env.CPU_RATE.split(',').map(Number);
if (RATES !== null && RATES.length !== SHAPES.length) throw new Error(`CPU_RATE needs one rate per shape of CPU_BATCHES (${SHAPES.join(',')})`);
const DISTINCT = env.CPU_BODIES === 'distinct';
if (env.CPU_BODIES !== undefined && !DISTINCT) throw new Error(`CPU_BODIES: only "distinct" is known, not ${env.CPU_BODIES}`);
if (DISTINCT && RATES === null) throw new Error('CPU_BODIES=distinct needs CPU_RATE (wrk sends one body)');
const rateOf = (points: number) => (RATES === null ? null : RATES[SHAPES.indexOf(points)] ?? null);
const WORKERS = env.CPU_WORKERS ?? '1';
const builds: { name: string; entry?: string; node: string }[] = [
  { name: 'this tree', node: process.execPath },
  ...(env.CPU_COMPARE ? [{ name: 'compared', entry: env.CPU_COMPARE, node: env.CPU_COMPARE_NODE ?? process.execPath }] : []),
];
const run = promisify(execFile);
const nodeVersion = (node: string): string => (node === process.execPath ? process.version : execFileSync(node, ['--version']).toString().trim());
const dir = mkdtempSync(join(tmpdir(), 'bench-cpu-'));

/** The bodies of one shape: one, or with CPU_BODIES=distinct 500 of distinct coordinates. */
function bodies(points: number, id: string): string[] {
  return DISTINCT ? Array.from({ length: 500 }, () => JSON.stringify(benchPoints(points, id, 'distinct'))) : [JSON.stringify(benchPoints(points, id))];
}

/** Closed-loop wrk, or CPU_RATE points per second paced, against url with POSTs of `payloads` in turn. */
async function load(url: string, payloads: string[], points: number, seconds: number): Promise<{ requests: number; non2xx: number; p99Ms: number }> {
  const rate = rateOf(points);
  if (rate === null) return wrk(url, payloads[0]!, seconds);
  const r = await pacedLoad({ url, path: '/track', body: payloads[0]!, bodies: payloads, connections: CONNECTIONS, rate: rate / points, seconds });
  return { requests: r.requests, non2xx: r.non2xx + r.errors, p99Ms: r.latencyMs.p99 };
}

/** wrk against url with a POST of `payload`; its summary parsed. */
async function wrk(url: string, payload: string, seconds: number): Promise<{ requests: number; non2xx: number; p99Ms: number }> {
  const bodyFile = join(dir, 'body.json');
  const script = join(dir, 'post.lua');
  writeFileSync(bodyFile, payload);
  writeFileSync(script, `wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nlocal f = io.open("${bodyFile}")\nwrk.body = f:read("*a")\nf:close()\n`);
  const { stdout } = await run('wrk', ['-t1', `-c${CONNECTIONS}`, `-d${seconds}s`, '--latency', '-s', script, `${url}/track`], { maxBuffer: 1 << 20 });
  const requests = Number(/(\d+) requests in/.exec(stdout)?.[1] ?? NaN);
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(stdout)?.[1] ?? 0);
  const p99 = /\s99%\s+([\d.]+)(us|ms|s)/.exec(stdout);
  const p99Ms = p99 ? Number(p99[1]) * (p99[2] === 'us' ? 1e-3 : p99[2] === 's' ? 1e3 : 1) : NaN;
  return { requests, non2xx, p99Ms };
}

interface Row {
  build: string;
  points: number;
  round: number;
  usPerPoint: number;
  usPerRequest: number;
  /** µs per point of the serving worker's JavaScript thread, of librdkafka's threads, of the rest. */
  split: { javascript: number; librdkafka: number; other: number };
  pointsPerSecond: number;
  p99Ms: number;
  non2xx: number;
  delivered: number;
  accepted: number;
}

async function measure(build: (typeof builds)[number], points: number, round: number, seconds = SECONDS): Promise<Row> {
  const id = `cpu${Date.now().toString(36)}`;
  const topic = await createTopic(`bench.${id}.${points}`);
  const target = await startTarget('ours', await freePort(), { MQ_BROKERS: BROKERS, MQ_TOPIC: topic, WORKERS }, build.entry, 'ready', build.node);
  try {
    const payload = bodies(points, id);
    const warmup = await load(target.url, payload, points, WARMUP_SECONDS);
    await waitForDelivery(topic, (warmup.requests - warmup.non2xx) * points);
    const warm = await topicSize(topic);
    const pids = processTree(target.proc.pid!);
    const cpu0 = cpuSeconds(pids);
    const threads0 = serviceThreadsCpu(pids);
    const r = await load(target.url, payload, points, seconds);
    const used = cpuSeconds(pids) - cpu0;
    const threads1 = serviceThreadsCpu(pids);
    const accepted = (r.requests - r.non2xx) * points;
    const perPoint = (role: keyof typeof threads1) => ((threads1[role] - threads0[role]) * 1e6) / accepted;
    await waitForDelivery(topic, warm + accepted);
    const delivered = (await topicSize(topic)) - warm;
    return {
      build: build.name, points, round,
      usPerPoint: (used * 1e6) / accepted,
      usPerRequest: (used * 1e6) / (r.requests - r.non2xx),
      split: { javascript: perPoint('javascript'), librdkafka: perPoint('librdkafka'), other: perPoint('other') },
      pointsPerSecond: accepted / seconds,
      p99Ms: r.p99Ms,
      non2xx: r.non2xx,
      delivered,
      accepted,
    };
  } finally {
    await target.stop();
    await deleteTopic(topic);
  }
}

/** µs of CPU per request of a service that refuses every request (no broker), 100-point bodies. */
async function measureRefused(build: (typeof builds)[number]): Promise<{ requests: number; usPerRequest: number }> {
  const closed = await freePort(); // nothing listens there: the producer stays 'connecting'
  const target = await startTarget('ours', await freePort(), { MQ_BROKERS: `127.0.0.1:${closed}`, WORKERS }, build.entry, 'listening', build.node);
  try {
    const payload = JSON.stringify(benchPoints(100, 'refused'));
    await wrk(target.url, payload, 2);
    const pids = processTree(target.proc.pid!);
    const cpu0 = cpuSeconds(pids);
    const r = await wrk(target.url, payload, REFUSED_SECONDS);
    const used = cpuSeconds(pids) - cpu0;
    if (r.non2xx !== r.requests) throw new Error(`${build.name}: ${r.requests - r.non2xx} of ${r.requests} requests were not refused without a broker`);
    return { requests: r.requests, usPerRequest: (used * 1e6) / r.requests };
  } finally {
    await target.stop();
  }
}

const f = (n: number, d = 2) => n.toFixed(d);
const rows: Row[] = [];
console.log(`${RATES === null ? `wrk -t1 -c${CONNECTIONS}` : `${RATES.join(' / ')} points/s paced over ${CONNECTIONS} connections${DISTINCT ? ', 500 bodies of distinct coordinates' : ''}`}, ${SECONDS} s per row after ${WARMUP_SECONDS} s of warm-up (the broker's ${BROKER_WARMUP_SECONDS} s before), WORKERS=${WORKERS}, ${ROUNDS} rounds; builds: ${builds.map((b) => `${b.entry ?? b.name} on ${nodeVersion(b.node)}`).join(' vs ')}`);
console.log('| build | points per request | round | µs CPU per point | of which JS thread / librdkafka / other | µs CPU per request | points/s | p99 ms | non-2xx | delivered / accepted |');
console.log('|---|---|---|---|---|---|---|---|---|---|');
try {
  if (BROKER_WARMUP_SECONDS > 0) await measure(builds[0]!, 100, 0, BROKER_WARMUP_SECONDS);
  for (const points of SHAPES) {
    for (let round = 1; round <= ROUNDS; round++) {
      // Alternate which build goes first, so that neither always meets a broker just warmed by the other.
      for (const build of round % 2 === 1 ? builds : [...builds].reverse()) {
        const r = await measure(build, points, round);
        rows.push(r);
        console.log(`| ${r.build} | ${r.points} | ${r.round} | ${f(r.usPerPoint)} | ${f(r.split.javascript)} / ${f(r.split.librdkafka)} / ${f(r.split.other)} | ${f(r.usPerRequest, 1)} | ${Math.round(r.pointsPerSecond)} | ${f(r.p99Ms)} | ${r.non2xx} | ${r.delivered} / ${r.accepted} |`);
      }
    }
  }
  if (REFUSED_SECONDS > 0) {
    console.log(`\nrefused: no broker reachable, every request answered 500, wrk -t1 -c${CONNECTIONS} with 100-point bodies, ${REFUSED_SECONDS} s per row`);
    console.log('| build | round | refused requests | µs CPU per refused request |');
    console.log('|---|---|---|---|');
    for (let round = 1; round <= ROUNDS; round++) {
      for (const build of round % 2 === 1 ? builds : [...builds].reverse()) {
        const r = await measureRefused(build);
        console.log(`| ${build.name} | ${round} | ${r.requests} | ${f(r.usPerRequest)} |`);
      }
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
if (builds.length === 2) {
  console.log('\nratio this tree / compared, µs CPU per point (mean of the rounds):');
  for (const points of SHAPES) {
    const mean = (b: string) => {
      const xs = rows.filter((r) => r.build === b && r.points === points).map((r) => r.usPerPoint);
      return xs.reduce((a, x) => a + x, 0) / xs.length;
    };
    console.log(`  ${points} points per request: ${f(mean('this tree'))} / ${f(mean('compared'))} = ${f(mean('this tree') / mean('compared'))}`);
  }
}
process.exit(rows.some((r) => r.delivered < r.accepted) ? 1 : 0);
