// `make bench-floor`: what one point costs in each stage of this design, measured alone, so that the
// suite's CPU per point can be read against a floor. In one process, for the suite's 100-point body:
//   1. from the body's bytes to the messages: the single pass a valid body takes (single-pass.ts),
//      and for comparison the general path stage by stage (UTF-8 check, decode, JSON.parse; the
//      validation fast path derived from the zod schema, and zod itself; encoding), through the
//      service's own functions, repeated FLOOR_REQUESTS (20,000) times;
//   2. the Kafka client's producer alone with the service's settings (producerSettings), failure
//      reports only as in ACK_MODE=async: FLOOR_MESSAGES (1,000,000) of the encoded values handed over
//      as the service does, one produceBatch() call per request (100 messages, and 1 for the floor
//      of 1-point requests), with the CPU of the JavaScript thread and of librdkafka's threads apart
//      (/proc/self/task); and, for comparison, one produce() call per message as before produceBatch,
//      and 100-message calls without librdkafka's statistics. The service keeps them on (the queue
//      accounting and the broker state read them), and with them librdkafka times every message it
//      writes into a batch: their cost is part of the floor;
//   3. 100-message batches with a delivery report for every message (what a per-message latency
//      histogram in ACK_MODE=async would cost, and why it has none).
//   4. HTTP alone: uWebSockets.js answering 202 to every 1-point POST without looking at it
//      (bench/lib/bare-http.ts, its own process), under autocannon for FLOOR_HTTP_SECONDS (5 s), with
//      the suite's 32 connections: CPU per request of that process (user and kernel time, /proc).
//   5. the tail this machine gives such a server at the design load of 1-point requests (the suite's
//      10000×1 row: 10,000 requests/s paced over 50 connections, bench/lib/design-load.ts), as many
//      processes as the service has workers, for FLOOR_TAIL_SECONDS (20 s) after 5 s of warm-up:
//      busy FLOOR_TAIL_WORK_US (0, 20 and 40) µs of CPU per request before the answer, a
//      stand-in for a service's own work. The design row's p99 reads against the row of its CPU per
//      request: on a machine whose cores also run the load generator and the broker, the tail is the
//      machine's share as much as the service's. Then the same servers with JOURNAL_SYNC=disk's wait:
//      each request also writes a 144-byte record (a 1-point journal record) into a file of a
//      temporary directory, and is answered once the service's own group commit
//      (src/journal/group-commit.ts, JOURNAL_SYNC_INTERVAL_MS) has synced it: the floor of a disk-mode
//      design row, set by this disk's fdatasync and the connections the answers hold meanwhile.
// Each producer run is repeated twice, alternating, after one warm-up run that is shown and not counted:
// the first million messages into the fresh topic were the dearest of a run (a broker that has not yet
// taken this topic's load, and the producer's first touch of its memory).
//
// On the malloc the service's workers get (WORKER_MALLOC, src/process/allocator.ts): with jemalloc installed,
// this process starts itself again with it preloaded, as the supervisor starts a worker.
import { spawn } from 'node:child_process';
import { isUtf8 } from 'node:buffer';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import Kafka from '@confluentinc/kafka-javascript';
import { z } from 'zod';
import { runsOnJemalloc, workerMallocEnv } from '../src/process/allocator.js';
import { loadConfig } from '../src/config.js';
import { producerSettings, STATS_INTERVAL_MS } from '../src/kafka/settings.js';
import { encodePoints } from '../src/track-point/encode.js';
import { messagesOf } from '../support/messages.js';
import { TrackPointSchema, validatePoints, type TrackPoint } from '../src/track-point/schema.js';
import { singlePass } from '../src/track-point/single-pass.js';
import { BROKERS, createTopic, deleteTopic, uniqueTopic } from '../support/kafka.js';
import { freePort } from '../support/ports.js';
import { cpuSeconds, threadCpuSeconds } from './lib/procfs.js';
import { DESIGN_LOAD } from './lib/design-load.js';
import { pacedLoad, type PacedResult } from './lib/paced-load.js';
import { benchPoints } from './lib/points.js';
import { startBareHttp } from './lib/targets.js';

const REQUESTS = Number(process.env.FLOOR_REQUESTS ?? 20_000);
const MESSAGES = Number(process.env.FLOOR_MESSAGES ?? 1_000_000);
const HTTP_SECONDS = Number(process.env.FLOOR_HTTP_SECONDS ?? 5);
const TAIL_SECONDS = Number(process.env.FLOOR_TAIL_SECONDS ?? 20);
const TAIL_WORK_US = (process.env.FLOOR_TAIL_WORK_US ?? '0,20,40').split(',').map(Number);
const POINTS = 100;
const CHUNK = 20_000; // produced per timer tick, so that librdkafka's callbacks are served in between

const body = Buffer.from(JSON.stringify(benchPoints(POINTS, 'floor')));

const cpuMicros = (since: NodeJS.CpuUsage) => {
  const d = process.cpuUsage(since);
  return d.user + d.system;
};

/** The CPU per point of fn, run on the floor body REQUESTS times after a JIT warm-up. */
function perPoint(fn: () => void): number {
  for (let i = 0; i < REQUESTS / 10; i++) fn();
  const t = process.cpuUsage();
  for (let i = 0; i < REQUESTS; i++) fn();
  return cpuMicros(t) / (REQUESTS * POINTS);
}

const parse = () => JSON.parse(body.toString('utf8')) as unknown[];

/** The general path stage by stage, the service's functions on one body; µs of CPU per point. */
function generalStages(): Record<string, number> {
  let sink = 0;
  const parsed = parse();
  const valid = validatePoints(parsed);
  if (!valid.ok) throw new Error('the floor body does not validate');
  const points: TrackPoint[] = valid.points;
  return {
    'UTF-8 check, decode, JSON.parse': perPoint(() => {
      if (isUtf8(body)) sink += parse().length;
    }),
    'validation (validatePoints, valid)': perPoint(() => {
      sink += validatePoints(parsed).ok ? 1 : 0;
    }),
    'encoding (encodePoints)': perPoint(() => {
      sink += encodePoints(points).bytes;
    }),
    ...(sink < 0 ? { never: 0 } : {}),
  };
}

/** The single pass over bodies, in turn; µs of CPU per point. */
function singlePassUs(bodies: readonly Buffer[]): number {
  let turn = 0;
  let encoded = 0;
  const us = perPoint(() => {
    const batch = singlePass(bodies[turn++ % bodies.length]!, POINTS);
    if (batch === null || 'details' in batch) throw new Error('the single pass did not take a floor body');
    encoded += batch.bytes;
  });
  if (encoded === 0) throw new Error('the single pass encoded nothing');
  return us;
}

/**
 * Delivery reports: for failures only, for every message through JavaScript, or failures only with
 * every acknowledgement counted per tag by librdkafka (produceBatch with a numeric tag, takeAcks()).
 */
type Reports = 'failures only' | 'every message' | 'counted per tag';
/** How the messages are handed over: produceBatch() calls of `batch` messages, or produce() per message. */
type Handover = { batch: number } | 'produce()';
/** librdkafka's statistics as the service has them (every STATS_INTERVAL_MS, each event parsed), or off. */
type Statistics = 'as the service' | 'off';

async function produce(
  topic: string,
  handover: Handover,
  reports: Reports,
  statistics: Statistics,
): Promise<{ js: number; librdkafka: number; total: number; reports: number }> {
  const config = loadConfig({
    ...process.env,
    MQ_BROKERS: BROKERS,
    MQ_TOPIC: topic,
    PRODUCER_QUEUE_MAX_POINTS: String(MESSAGES),
    PRODUCER_QUEUE_MAX_BYTES: String(1024 * MESSAGES),
  });
  const settings = producerSettings(config, 'bench-floor');
  const global: Kafka.ProducerGlobalConfig = { ...settings.global };
  if (statistics === 'off') global['statistics.interval.ms'] = 0;
  if (reports === 'every message') Object.assign(global, { dr_msg_cb: false, dr_cb: true, 'delivery.report.only.error': false });
  const producer = new Kafka.Producer(global, settings.topic);
  let reported = 0;
  producer.on('delivery-report', () => reported++);
  let statisticsEvents = 0;
  producer.on('event.stats', (event: { message: string }) => {
    statisticsEvents += (JSON.parse(event.message) as { msg_cnt: number }).msg_cnt >= 0 ? 1 : 0;
  });
  let acknowledged = 0;
  const countAcks = () => {
    const acks = producer.takeAcks();
    if (acks !== undefined) for (let i = 1; i < acks.length; i += 2) acknowledged += acks[i]!;
  };
  // As the service polls: librdkafka's callbacks served every 10 ms, then the acknowledgements counted.
  const poll = setInterval(() => {
    if (!producer.isConnected()) return;
    producer.poll();
    countAcks();
  }, 10);
  await new Promise<void>((resolve, reject) => producer.connect({}, (err) => (err ? reject(err) : resolve())));
  const valid = validatePoints(JSON.parse(body.toString('utf8')) as unknown[]);
  if (!valid.ok) throw new Error('the floor body does not validate');
  // Requests of `batch` points, encoded as the service does (copies: encodePoints reuses its buffers).
  const batch = handover === 'produce()' ? 1 : handover.batch;
  const requests = Array.from({ length: POINTS / batch }, (_, r) => {
    const e = encodePoints(valid.points.slice(r * batch, (r + 1) * batch));
    return { data: Buffer.from(e.data), messages: e.messages.slice() };
  });
  const { keys, values } = messagesOf(encodePoints(valid.points));

  const threads0 = threadCpuSeconds();
  let sent = 0;
  while (sent < MESSAGES) {
    const now = Date.now();
    const end = Math.min(MESSAGES, sent + CHUNK);
    if (handover === 'produce()') {
      for (; sent < end; sent++) producer.produce(topic, null, values[sent % POINTS]!, keys[sent % POINTS], now);
    } else {
      for (let r = 0; sent < end; sent += batch, r = (r + 1) % requests.length) {
        const req = requests[r]!;
        if (reports === 'counted per tag') producer.produceBatch(topic, req.data, req.messages, r, now);
        else producer.produceBatch(topic, req.data, req.messages);
      }
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  await new Promise<void>((resolve, reject) => producer.flush(60_000, (err) => (err ? reject(err) : resolve())));
  while (reports === 'every message' && reported < MESSAGES) await new Promise((r) => setTimeout(r, 10));
  countAcks();
  if (reports === 'counted per tag' && acknowledged !== MESSAGES) throw new Error(`${acknowledged} acknowledgements counted of ${MESSAGES}`);
  const threads1 = threadCpuSeconds();
  clearInterval(poll);
  await new Promise<void>((resolve) => producer.disconnect(() => resolve()));
  if (statisticsEvents > 0 !== (statistics === 'as the service')) throw new Error(`statistics ${statistics}, yet ${statisticsEvents} statistics events`);
  let js = 0;
  let librdkafka = 0;
  for (const [name, seconds] of Object.entries(threads1)) {
    const used = (seconds - (threads0[name] ?? 0)) * 1e6;
    if (name.startsWith('rdk:')) librdkafka += used;
    else js += used;
  }
  return {
    js: js / MESSAGES,
    librdkafka: librdkafka / MESSAGES,
    total: (js + librdkafka) / MESSAGES,
    reports: reports === 'counted per tag' ? acknowledged : reported,
  };
}

/** Bare uWebSockets.js processes on one port (SO_REUSEPORT, as the service's workers), once each says it listens. */
/** CPU per request of a bare uWebSockets.js process answering 202, under closed-loop load. */
async function httpFloor(): Promise<{ perRequest: number; requestsPerSecond: number }> {
  const port = await freePort();
  const server = (await startBareHttp(port, 1, 0))[0]!;
  try {
    const point = JSON.stringify([{ container_id: 'floor-c1', lat: 51.9, lon: 4.4, timestamp: '2024-05-01T12:00:00.123Z', speed: 3 }]);
    const opts = {
      url: `http://127.0.0.1:${port}/track`,
      method: 'POST' as const,
      body: point,
      headers: { 'content-type': 'application/json' },
      connections: 32,
      pipelining: 1,
    };
    await autocannon({ ...opts, duration: 1 }); // warm-up
    const cpu0 = cpuSeconds([server.pid!]);
    const r = await autocannon({ ...opts, duration: HTTP_SECONDS });
    const used = cpuSeconds([server.pid!]) - cpu0;
    return { perRequest: (used * 1e6) / r['2xx'], requestsPerSecond: r['2xx'] / HTTP_SECONDS };
  } finally {
    server.kill();
  }
}

/**
 * The design load of 1-point requests against bare servers busy `workUs` a request (with `commit`,
 * each answer also waits for an fdatasync of its record): their latency and CPU per request.
 */
async function designTail(workUs: number, processes: number, commit: boolean): Promise<{ load: PacedResult; perRequest: number }> {
  const port = await freePort();
  const commitDir = commit ? mkdtempSync(join(tmpdir(), 'floor-commit-')) : undefined;
  const servers = await startBareHttp(port, processes, workUs, commitDir);
  try {
    const { points, connections, rate } = DESIGN_LOAD['10000×1'];
    const opts = { url: `http://127.0.0.1:${port}`, path: '/track', body: JSON.stringify(benchPoints(points, 'floor')), connections, rate };
    await pacedLoad({ ...opts, seconds: 5 }); // warm-up
    const pids = servers.map((server) => server.pid!);
    const cpu0 = cpuSeconds(pids);
    const load = await pacedLoad({ ...opts, seconds: TAIL_SECONDS });
    return { load, perRequest: ((cpuSeconds(pids) - cpu0) * 1e6) / load.requests };
  } finally {
    for (const server of servers) server.kill();
    if (commitDir !== undefined) rmSync(commitDir, { recursive: true, force: true });
  }
}

const malloc = loadConfig(process.env).workerMalloc;
if (malloc.preload !== null && !runsOnJemalloc()) {
  const child = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url)], {
    env: { ...process.env, ...workerMallocEnv(malloc, process.env) },
    stdio: 'inherit',
  });
  child.once('exit', (code, signal) => process.exit(code ?? (signal === null ? 1 : 128)));
} else {
  await measure();
}

async function measure(): Promise<void> {
  const f = (n: number) => n.toFixed(2);
  console.log(
    `node ${process.version}, librdkafka ${Kafka.librdkafkaVersion}, malloc ${runsOnJemalloc() ? 'jemalloc' : 'system'} (WORKER_MALLOC, as the service's workers), ${POINTS}-point body of ${body.length} bytes`,
  );
  // A body repeated again and again lets V8 answer every number-to-text conversion from its cache of
  // recent numbers; real traffic has new coordinates in every point (encode.ts, writeNumber).
  const distinctBodies = Array.from({ length: 500 }, () => Buffer.from(JSON.stringify(benchPoints(POINTS, 'floor', 'distinct'))));
  const single = singlePassUs([body]);
  console.log(`\nstages, ${REQUESTS} bodies (µs of CPU per point):`);
  console.log(`  single pass: bytes to messages, the path of a valid body  ${f(single)}`);
  console.log(`    the same on 500 bodies of distinct 6-decimal coordinates in turn, as real traffic: ${f(singlePassUs(distinctBodies))}`);
  const computedBodies = Array.from({ length: 500 }, () => Buffer.from(JSON.stringify(benchPoints(POINTS, 'floor', 'computed'))));
  console.log(`    the same on 500 bodies of distinct full-precision coordinates (a program's doubles): ${f(singlePassUs(computedBodies))}`);
  console.log('  the general path (a body the single pass leaves: escapes, non-ASCII text, an invalid point):');
  const general = generalStages();
  for (const [name, us] of Object.entries(general)) console.log(`    ${name.padEnd(34)} ${f(us)}`);
  // What validation cost before the fast path, and still costs a request with an invalid point.
  const allPoints = z.array(TrackPointSchema);
  const parsed = parse();
  console.log(`    (zod itself on the same body, the path of a request with an invalid point: ${f(perPoint(() => void allPoints.safeParse(parsed)))})`);
  const distinct = distinctBodies.map((b) => {
    const valid = validatePoints(JSON.parse(b.toString('utf8')) as unknown[]);
    if (!valid.ok) throw new Error('the distinct floor points do not validate');
    return valid.points;
  });
  let turn = 0;
  let encoded = 0;
  const distinctEncoding = perPoint(() => {
    encoded += encodePoints(distinct[turn++ % distinct.length]!).bytes;
  });
  if (encoded === 0) throw new Error('the distinct requests encoded to nothing');
  console.log(`    (encoding the 500 bodies of distinct coordinates in turn: ${f(distinctEncoding)})`);
  const topic = await createTopic(uniqueTopic('floor'));
  try {
    console.log(
      `\nKafka client's producer, ${MESSAGES} messages, the service's settings, librdkafka's statistics every ${STATS_INTERVAL_MS} ms unless a row says off (µs of CPU per message):`,
    );
    const service: Statistics = 'as the service';
    const runs: { label: string; handover: Handover; reports: Reports; statistics: Statistics }[] = [
      { label: `produceBatch(), ${POINTS} a call, reports for failures only`, handover: { batch: POINTS }, reports: 'failures only', statistics: service },
      { label: `produceBatch(), ${POINTS} a call, reports for every message`, handover: { batch: POINTS }, reports: 'every message', statistics: service },
      { label: `produceBatch(), ${POINTS} a call, acks counted per tag`, handover: { batch: POINTS }, reports: 'counted per tag', statistics: service },
      { label: 'produceBatch(), 1 a call, acks counted per tag', handover: { batch: 1 }, reports: 'counted per tag', statistics: service },
      { label: 'produceBatch(), 1 a call, reports for failures only', handover: { batch: 1 }, reports: 'failures only', statistics: service },
      { label: 'produce() per message (before produceBatch), failures only', handover: 'produce()', reports: 'failures only', statistics: service },
      { label: `produceBatch(), ${POINTS} a call, failures only, statistics off`, handover: { batch: POINTS }, reports: 'failures only', statistics: 'off' },
    ];
    const warm = await produce(topic, runs[0]!.handover, runs[0]!.reports, runs[0]!.statistics);
    console.log(
      `  ${'warm-up (not counted), as the first row'.padEnd(60)}: JavaScript thread ${f(warm.js)} + librdkafka threads ${f(warm.librdkafka)} = ${f(warm.total)}`,
    );
    const best = new Map<string, number>();
    for (const run of [...runs, ...runs]) {
      const r = await produce(topic, run.handover, run.reports, run.statistics);
      best.set(run.label, Math.min(best.get(run.label) ?? Infinity, r.total));
      console.log(`  ${run.label.padEnd(60)}: JavaScript thread ${f(r.js)} + librdkafka threads ${f(r.librdkafka)} = ${f(r.total)}  (${r.reports} reports)`);
    }
    const low = best.get(runs[0]!.label)!;
    const lowSingle = best.get('produceBatch(), 1 a call, reports for failures only')!;
    const http = await httpFloor();
    console.log(
      `\nHTTP alone (uWebSockets.js answering 202, 1-point bodies, 32 connections, ${HTTP_SECONDS} s): ${f(http.perRequest)} µs of CPU per request at ${Math.round(http.requestsPerSecond)} requests/s`,
    );
    console.log(
      `\nfloor per point at ${POINTS} points per request: single pass ${f(single)} + producer ${f(low)} + HTTP ${f(http.perRequest / POINTS)} = ${f(single + low + http.perRequest / POINTS)} µs of CPU`,
    );
    console.log(
      `floor per request at 1 point per request: HTTP ${f(http.perRequest)} + producer ${f(lowSingle)} = ${f(http.perRequest + lowSingle)} µs of CPU (stages not included)`,
    );
    const workers = loadConfig(process.env).workers;
    const { connections, rate } = DESIGN_LOAD['10000×1'];
    console.log(
      `\nthe tail at the design load of 1-point requests (${rate} requests/s paced over ${connections} connections, ${TAIL_SECONDS} s) of ${workers} bare uWebSockets.js processes, busy a while per request as a service's own work:`,
    );
    const interval = loadConfig(process.env).journalSyncIntervalMs;
    for (const commit of [false, true]) {
      if (commit)
        console.log(
          `the same, each answer after an fdatasync of its record (the service's group commit, at most one every ${interval} ms): the floor of JOURNAL_SYNC=disk`,
        );
      for (const workUs of TAIL_WORK_US) {
        const { load, perRequest } = await designTail(workUs, workers, commit);
        const l = load.latencyMs;
        console.log(
          `  busy ${String(workUs).padStart(3)} µs: ${f(perRequest)} µs of CPU per request, p50 ${f(l.p50)} p99 ${f(l.p99)} p99.9 ${f(l.p999)} max ${f(l.max)} ms, ${load.queued} requests waited for a connection, ${load.non2xx + load.errors} not answered 2xx`,
        );
      }
    }
  } finally {
    await deleteTopic(topic);
  }
  process.exit(0);
}
