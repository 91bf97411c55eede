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
// on one machine even where the absolute figures move with what else the machine does. Several,
// comma-separated, run in turn (each round starting with the next build); a copy of this tree among
// them (an A/A pair) shows what ratio the run's noise alone gives.
// CPU_TOGETHER=1 (paced only) measures the builds of a round at the same time, each at CPU_RATE
// against its own topic, in one window, instead of one after the other: what else the machine does
// in that window (the broker's collections, its log flushes, other tenants of the host) then falls on
// every build alike. One after the other, an A/A pair's rounds differed by up to 19 % at the paced
// 1-point row, and ten rounds could not tell 3 % (bench/HISTORY.md, 2026-11-27).
// CPU_COMPARE_NODE=path/to/node runs the compared builds on another Node.js (one version against
// another, the same code: bench/README.md, "Node 24 against Node 20"). CPU_WORKERS: the service's
// WORKERS (1; 2 is the design-load shape on 2 cores).
// CPU_ENV / CPU_COMPARE_ENV: more environment for this tree / for the compared builds, as
// comma-separated NAME=VALUE pairs: one build against itself with a setting on and off (e.g.
// CPU_ENV=MQ_REFUSED_TOPIC=bench.refused CPU_COMPARE=dist/src/main.js,dist/src/main.js: the
// refused-requests topic's cost to accepted requests, with an A/A pair; CPU_ENV=DELIVERY=exactly-once:
// the cost of transactions, each build of it given a positions topic of its own).
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { BROKERS, createTopic, deleteTopic } from '../support/kafka.js';
import { freePort } from '../support/ports.js';
import { committedCount, topicSize, waitForDelivery } from './lib/delivery.js';
import { pacedLoad } from './lib/paced-load.js';
import { cpuSeconds, processTree, serviceThreadsCpu, type ServiceThreadsCpu } from './lib/procfs.js';
import { benchPoints } from './lib/points.js';
import { startTarget, type Target } from './lib/targets.js';

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
const rateOf = (points: number) => (RATES === null ? null : (RATES[SHAPES.indexOf(points)] ?? null));
const WORKERS = env.CPU_WORKERS ?? '1';
const compared = env.CPU_COMPARE ? env.CPU_COMPARE.split(',') : [];
const TOGETHER = env.CPU_TOGETHER === '1';
if (TOGETHER && (RATES === null || compared.length === 0))
  throw new Error('CPU_TOGETHER=1 needs CPU_RATE (under a closed loop the faster build would take the machine) and CPU_COMPARE');
/** NAME=VALUE,NAME=VALUE as an environment. */
function envPairs(variable: string): Record<string, string> {
  const text = env[variable] ?? '';
  if (text === '') return {};
  return Object.fromEntries(
    text.split(',').map((pair) => {
      const at = pair.indexOf('=');
      if (at < 1) throw new Error(`${variable}: expected NAME=VALUE pairs separated by commas, got ${JSON.stringify(pair)}`);
      return [pair.slice(0, at), pair.slice(at + 1)];
    }),
  );
}
const builds: { name: string; entry?: string; node: string; env: Record<string, string> }[] = [
  { name: 'this tree', node: process.execPath, env: envPairs('CPU_ENV') },
  ...compared.map((entry, i) => ({
    name: compared.length === 1 ? 'compared' : `compared ${i + 1}`,
    entry,
    node: env.CPU_COMPARE_NODE ?? process.execPath,
    env: envPairs('CPU_COMPARE_ENV'),
  })),
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
  writeFileSync(
    script,
    `wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nlocal f = io.open("${bodyFile}")\nwrk.body = f:read("*a")\nf:close()\n`,
  );
  const { stdout } = await run('wrk', ['-t1', `-c${CONNECTIONS}`, `-d${seconds}s`, '--latency', '-s', script, `${url}/track`], { maxBuffer: 1 << 20 });
  const requests = Number(/(\d+) requests in/.exec(stdout)?.[1] ?? NaN);
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(stdout)?.[1] ?? 0);
  const p99 = /\s99%\s+([\d.]+)(us|ms|s)/.exec(stdout);
  const p99Ms = p99 ? Number(p99[1]) * (p99[2] === 'us' ? 1e-3 : p99[2] === 's' ? 1e3 : 1) : NaN;
  return { requests, non2xx, p99Ms };
}

/** DELIVERY=exactly-once: the build writes its points in Kafka transactions. */
const transactional = (build: (typeof builds)[number]): boolean => build.env.DELIVERY === 'exactly-once';

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
  /** Written in transactions: every point once, so more delivered than accepted is a failure too. */
  transactional: boolean;
}

/**
 * One row per build of `together`, measured in one window: each build started on a fresh topic,
 * warmed up, then loaded (all at once when there are several: CPU_TOGETHER) while the CPU of its
 * processes is read, and its points read back from Kafka.
 */
async function measure(together: readonly (typeof builds)[number][], points: number, round: number, seconds = SECONDS): Promise<Row[]> {
  const started: { build: (typeof builds)[number]; topic: string; target: Target; payload: string[] }[] = [];
  try {
    for (const build of together) {
      const id = `cpu${Date.now().toString(36)}${started.length}`;
      const topic = await createTopic(`bench.${id}.${points}`);
      // DELIVERY=exactly-once: its positions topic, compacted (kafka/positions.ts).
      const positions = transactional(build) ? await createTopic(`${topic}.positions`, 1, 1, { config: { 'cleanup.policy': 'compact' } }) : null;
      const target = await startTarget(
        'ours',
        await freePort(),
        { MQ_BROKERS: BROKERS, MQ_TOPIC: topic, WORKERS, ...(positions === null ? {} : { MQ_POSITIONS_TOPIC: positions, INSTANCE_ID: id }), ...build.env },
        build.entry,
        'ready',
        build.node,
      ).catch(async (err: unknown) => {
        await deleteTopic(topic);
        throw err;
      });
      started.push({ build, topic, target, payload: bodies(points, id) });
    }
    // What the topic held after the warm-up: its size, or for a topic written in transactions the
    // points accepted (counted with the window's at the end: committedCount).
    const warm = await Promise.all(
      started.map(async (s) => {
        const warmup = await load(s.target.url, s.payload, points, WARMUP_SECONDS);
        const accepted = (warmup.requests - warmup.non2xx) * points;
        await waitForDelivery(s.topic, accepted);
        return transactional(s.build) ? accepted : topicSize(s.topic);
      }),
    );
    const pids = started.map((s) => processTree(s.target.proc.pid!));
    const cpu0 = pids.map((p) => cpuSeconds(p));
    const threads0 = pids.map((p) => serviceThreadsCpu(p));
    const results = await Promise.all(started.map((s) => load(s.target.url, s.payload, points, seconds)));
    const used = pids.map((p, i) => cpuSeconds(p) - cpu0[i]!);
    const threads1 = pids.map((p) => serviceThreadsCpu(p));
    return await Promise.all(
      started.map(async (s, i): Promise<Row> => {
        const r = results[i]!;
        const accepted = (r.requests - r.non2xx) * points;
        const perPoint = (role: keyof ServiceThreadsCpu) => ((threads1[i]![role] - threads0[i]![role]) * 1e6) / accepted;
        // committedCount waits for the points itself: a transactional topic's watermarks are not exact.
        let delivered: number;
        if (transactional(s.build)) delivered = (await committedCount(s.topic, warm[i]! + accepted)) - warm[i]!;
        else {
          await waitForDelivery(s.topic, warm[i]! + accepted);
          delivered = (await topicSize(s.topic)) - warm[i]!;
        }
        return {
          build: s.build.name,
          points,
          round,
          usPerPoint: (used[i]! * 1e6) / accepted,
          usPerRequest: (used[i]! * 1e6) / (r.requests - r.non2xx),
          split: { javascript: perPoint('javascript'), librdkafka: perPoint('librdkafka'), other: perPoint('other') },
          pointsPerSecond: accepted / seconds,
          p99Ms: r.p99Ms,
          non2xx: r.non2xx,
          delivered,
          accepted,
          transactional: transactional(s.build),
        };
      }),
    );
  } finally {
    for (const s of started) {
      await s.target.stop();
      await deleteTopic(s.topic);
      if (transactional(s.build)) await deleteTopic(`${s.topic}.positions`);
    }
  }
}

/** µs of CPU per request of a service that refuses every request (no broker), 100-point bodies. */
async function measureRefused(build: (typeof builds)[number]): Promise<{ requests: number; usPerRequest: number }> {
  const closed = await freePort(); // nothing listens there: the producer stays 'connecting'
  const target = await startTarget(
    'ours',
    await freePort(),
    { MQ_BROKERS: `127.0.0.1:${closed}`, WORKERS, ...build.env },
    build.entry,
    'listening',
    build.node,
  );
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

/** The builds in round `round`'s order: each round starts with the next one, so that none always meets a broker just warmed by another (with two, they alternate). */
function roundOrder(round: number): typeof builds {
  const first = (round - 1) % builds.length;
  return [...builds.slice(first), ...builds.slice(0, first)];
}

const f = (n: number, d = 2) => n.toFixed(d);
const rows: Row[] = [];
console.log(
  `${RATES === null ? `wrk -t1 -c${CONNECTIONS}` : `${RATES.join(' / ')} points/s paced over ${CONNECTIONS} connections${DISTINCT ? ', 500 bodies of distinct coordinates' : ''}`}, ${SECONDS} s per row after ${WARMUP_SECONDS} s of warm-up (the broker's ${BROKER_WARMUP_SECONDS} s before), WORKERS=${WORKERS}, ${ROUNDS} rounds${TOGETHER ? ', the builds of a round loaded at the same time' : ''}; builds: ${builds
    .map(
      (b) =>
        `${b.entry ?? b.name} on ${nodeVersion(b.node)}${
          Object.keys(b.env).length > 0
            ? ` with ${Object.entries(b.env)
                .map(([k, v]) => `${k}=${v}`)
                .join(' ')}`
            : ''
        }`,
    )
    .join(' vs ')}`,
);
console.log(
  '| build | points per request | round | µs CPU per point | of which JS thread / librdkafka / other | µs CPU per request | points/s | p99 ms | non-2xx | delivered / accepted |',
);
console.log('|---|---|---|---|---|---|---|---|---|---|');
try {
  if (BROKER_WARMUP_SECONDS > 0) await measure([builds[0]!], 100, 0, BROKER_WARMUP_SECONDS);
  for (const points of SHAPES) {
    for (let round = 1; round <= ROUNDS; round++) {
      const order = roundOrder(round);
      for (const together of TOGETHER ? [order] : order.map((b) => [b])) {
        for (const r of await measure(together, points, round)) {
          rows.push(r);
          console.log(
            `| ${r.build} | ${r.points} | ${r.round} | ${f(r.usPerPoint)} | ${f(r.split.javascript)} / ${f(r.split.librdkafka)} / ${f(r.split.other)} | ${f(r.usPerRequest, 1)} | ${Math.round(r.pointsPerSecond)} | ${f(r.p99Ms)} | ${r.non2xx} | ${r.delivered} / ${r.accepted} |`,
          );
        }
      }
    }
  }
  if (REFUSED_SECONDS > 0) {
    console.log(`\nrefused: no broker reachable, every request answered 500, wrk -t1 -c${CONNECTIONS} with 100-point bodies, ${REFUSED_SECONDS} s per row`);
    console.log('| build | round | refused requests | µs CPU per refused request |');
    console.log('|---|---|---|---|');
    for (let round = 1; round <= ROUNDS; round++) {
      for (const build of roundOrder(round)) {
        const r = await measureRefused(build);
        console.log(`| ${build.name} | ${round} | ${r.requests} | ${f(r.usPerRequest)} |`);
      }
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
// Two figures per compared build: the ratio of the means, and the ratios of each round's pair (this
// tree's row and the compared build's, of the same round), their median and range. A round
// that ran while the machine did something else moves both rows of its pair, which the pair's ratio
// cancels and the means do not; a copy of this tree as a compared build (an A/A pair) shows how far
// the ratios spread when nothing differs.
for (const other of builds.slice(1)) {
  console.log(`\nratio this tree / ${other.name} (${other.entry}), µs CPU per point:`);
  for (const points of SHAPES) {
    const of = (b: string) =>
      rows
        .filter((r) => r.build === b && r.points === points)
        .sort((a, b2) => a.round - b2.round)
        .map((r) => r.usPerPoint);
    const ours = of('this tree');
    const theirs = of(other.name);
    const mean = (xs: number[]) => xs.reduce((a, x) => a + x, 0) / xs.length;
    const pairs = ours.map((x, i) => x / theirs[i]!).sort((a, b) => a - b);
    const median = pairs.length % 2 === 1 ? pairs[(pairs.length - 1) / 2]! : (pairs[pairs.length / 2 - 1]! + pairs[pairs.length / 2]!) / 2;
    console.log(
      `  ${points} points per request: means ${f(mean(ours))} / ${f(mean(theirs))} = ${f(mean(ours) / mean(theirs))}; rounds' ratios median ${f(median)} (${f(pairs[0]!)} to ${f(pairs[pairs.length - 1]!)})`,
    );
  }
}
process.exit(rows.some((r) => r.delivered < r.accepted || (r.transactional && r.delivered > r.accepted)) ? 1 : 0);
