// make bench-exactly-once: what DELIVERY=exactly-once costs at the design load (issue 46's bounds).
// For each round and shape of the design load (bench/lib/design-load.ts), three cases in turn (each
// round starting with the next), each on a fresh service (WORKERS=2) and topic:
//   at least once        the default
//   exactly once         DELIVERY=exactly-once, its positions topic fresh too
//   at least once again  the default once more: what two runs of the same code differ by (A/A)
// The load comes in two windows of EOS_SECONDS, after EOS_WARMUP_SECONDS of warm-up:
//   1. a read_committed consumer, in this process, follows the topic from its start: from a point's
//      202 (its Kafka timestamp, the time the service accepted it) to the moment the consumer has it
//      is the time until a consumer can see the point (the bound: TRANSACTION_COMMIT_INTERVAL_MS + 50
//      ms at p99); beside it, how long the commits took after their interval (the service's histogram).
//      The load of this window (and of the warm-up) is paced from a worker thread of this process
//      (bench/lib/paced-load.ts): vegeta took three quarters of a core at 10,000 requests a second,
//      CPU that the reader and the service lack on this 2-core machine. What the reader still waits
//      for at times, in either mode, is the local broker's pauses (bench/HISTORY.md, 2026-11-29).
//   2. the reader stopped, nothing else runs: vegeta's p99 of the 202, what the devices see.
// Why two windows: the reader takes a core's share of this 2-core machine at 10,000 points a second,
// and with it running the 202's p99 at 10000×1 read 18 to 418 ms, in either mode (bench/HISTORY.md).
// Then a second reader counts the topic: every point answered 202, in both windows, is looked for, once.
//
//   exactly once, compared build   with EOS_COMPARE=path/to/other/dist/src/main.js (a worktree of an
//                                  earlier commit, built): the same, that build's (case 4, added to the
//                                  chosen cases when EOS_COMPARE is set)
//
//   EOS_SECONDS 20   EOS_WARMUP_SECONDS 3   EOS_ROUNDS 3   EOS_SHAPES 100×100,10000×1   EOS_CASES 1,2,3
import { mkdtempSync, writeFileSync } from 'node:fs';
import { release, tmpdir } from 'node:os';
import { join } from 'node:path';
import Kafka from '@confluentinc/kafka-javascript';
import { BROKERS, createTopic, deleteTopic } from '../support/kafka.js';
import { freePort } from '../support/ports.js';
import { DESIGN_LOAD } from './lib/design-load.js';
import { envNumber } from './lib/env.js';
import { benchPoints } from './lib/points.js';
import { pacedLoad } from './lib/paced-load.js';
import { cpuModel } from './lib/procfs.js';
import { histogramQuantile } from './lib/prom-text.js';
import { startTarget } from './lib/targets.js';
import { vegetaAttack, vegetaPath, type VegetaReport } from './lib/vegeta.js';
import { median, roundOrder } from './lib/rounds.js';

const SECONDS = envNumber('EOS_SECONDS', 20);
const WARMUP_SECONDS = envNumber('EOS_WARMUP_SECONDS', 3);
const ROUNDS = envNumber('EOS_ROUNDS', 3);
const ALL_CASES = ['at least once', 'exactly once', 'at least once again', 'exactly once, compared build'] as const;
type Case = (typeof ALL_CASES)[number];
const COMPARE = process.env.EOS_COMPARE;
const CHOSEN = [...(process.env.EOS_CASES ?? '1,2,3').split(',').map(Number), ...(COMPARE === undefined ? [] : [4])];
const CASES = ALL_CASES.filter((_, i) => CHOSEN.includes(i + 1));
const SHAPES = (process.env.EOS_SHAPES ?? Object.keys(DESIGN_LOAD).join(',')).split(',') as (keyof typeof DESIGN_LOAD)[];
const vegeta = vegetaPath();
const dir = mkdtempSync(join(tmpdir(), 'bench-eos-'));

interface Row {
  shape: string;
  case: Case;
  round: number;
  report: VegetaReport;
  /** ms from acceptance to a read_committed consumer having the point: p50, p99, max. */
  visible: { p50: number; p99: number; max: number; n: number };
  /** Exactly once: ms from the end of a transaction's interval to its commit (ingest_transaction_commit_seconds), p50 and p99; null otherwise. */
  commit: { p50: number; p99: number } | null;
  accepted: number;
  found: number;
}

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))] ?? NaN;

/**
 * A read_committed consumer of the whole topic from its start: for each message accepted at or after
 * `from` (its timestamp), how long after its acceptance it was read.
 */
function follow(topic: string) {
  const consumer = new Kafka.KafkaConsumer(
    {
      'metadata.broker.list': BROKERS,
      'group.id': `bench-eos-${topic}`,
      'enable.auto.commit': false,
      'isolation.level': 'read_committed',
      'fetch.wait.max.ms': 5,
    },
    { 'auto.offset.reset': 'earliest' },
  );
  const delays: number[] = [];
  let count = 0;
  let from = Infinity;
  let running = true;
  const done = (async () => {
    await new Promise<void>((resolve, reject) => consumer.connect({ timeout: 15_000 }, (err) => (err ? reject(err) : resolve())));
    consumer.assign(Array.from({ length: 6 }, (_, partition) => ({ topic, partition, offset: 0 })));
    // consume(n) waits for n messages or this timeout (the binding's default: 1 s): the reader's own
    // batching must not be what is measured.
    consumer.setDefaultConsumeTimeout(2);
    while (running) {
      const batch = await new Promise<Kafka.Message[]>((resolve, reject) => consumer.consume(200, (err, m) => (err ? reject(err) : resolve(m))));
      const now = Date.now();
      for (const m of batch) {
        count++;
        const at = m.timestamp ?? 0;
        if (at >= from) delays.push(now - at);
      }
      if (batch.length === 0) await new Promise((r) => setTimeout(r, 1));
    }
    await new Promise<void>((resolve) => consumer.disconnect(() => resolve()));
  })();
  return {
    measureFrom: (t: number) => void (from = t),
    count: () => count,
    async stop() {
      running = false;
      await done;
      const sorted = delays.sort((a, b) => a - b);
      return { p50: quantile(sorted, 0.5), p99: quantile(sorted, 0.99), max: sorted.at(-1) ?? NaN, n: sorted.length };
    },
  };
}

async function measure(shapeName: keyof typeof DESIGN_LOAD, which: Case, round: number): Promise<Row> {
  const shape = DESIGN_LOAD[shapeName];
  const id = `eos${Date.now().toString(36)}`;
  const topic = await createTopic(`bench.${id}`);
  const exactlyOnce = which.startsWith('exactly once');
  if (exactlyOnce) await createTopic(`${topic}.positions`, 1, 1, { config: { 'cleanup.policy': 'compact' } });
  const env: Record<string, string> = {
    MQ_BROKERS: BROKERS,
    MQ_TOPIC: topic,
    WORKERS: '2',
    ...(exactlyOnce ? { DELIVERY: 'exactly-once', INSTANCE_ID: id } : {}),
  };
  const target = await startTarget('ours', await freePort(), env, which === 'exactly once, compared build' ? COMPARE : undefined);
  const bodyFile = join(dir, `${shapeName}.json`);
  const body = JSON.stringify(benchPoints(shape.points, id));
  writeFileSync(bodyFile, body);
  const readers: ReturnType<typeof follow>[] = [];
  const read = () => {
    const reader = follow(topic);
    readers.push(reader);
    return reader;
  };
  try {
    const attack = (seconds: number) => vegetaAttack(vegeta, { url: target.url, bodyFile, headers: {}, rate: shape.rate, seconds, dir });
    const points = (r: VegetaReport) => (r.status_codes['202'] ?? 0) * shape.points;
    const paced = async (seconds: number) =>
      (await pacedLoad({ url: target.url, path: '/track', body, connections: shape.connections, rate: shape.rate, seconds })).ok2xx * shape.points;
    const follower = read();
    const warm = await paced(WARMUP_SECONDS);
    follower.measureFrom(Date.now());
    const scrape = () => fetch(`${target.url}/metrics`).then((r) => r.text());
    const before = await scrape();
    const followed = await paced(SECONDS);
    const after = await scrape();
    const commitMs = (q: number) => 1000 * (histogramQuantile(before, after, 'ingest_transaction_commit_seconds', q) ?? NaN);
    const commit = exactlyOnce ? { p50: Math.round(commitMs(0.5)), p99: Math.round(commitMs(0.99)) } : null;
    const until = async (reader: ReturnType<typeof follow>, count: number) => {
      const deadline = Date.now() + 60_000;
      while (reader.count() < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    };
    await until(follower, warm + followed);
    const visible = await follower.stop();
    const { report } = await attack(SECONDS);
    const accepted = warm + followed + points(report);
    const counter = read();
    await until(counter, accepted);
    await new Promise((r) => setTimeout(r, 1_000)); // more than accepted: duplicates
    return { shape: shapeName, case: which, round, report, visible, commit, accepted, found: counter.count() };
  } finally {
    for (const reader of readers) await reader.stop().catch(() => undefined);
    await target.stop();
    await deleteTopic(topic);
    if (exactlyOnce) await deleteTopic(`${topic}.positions`);
  }
}

const ms = (ns: number) => (ns / 1e6).toFixed(2);

console.log(
  `${cpuModel()}, Linux ${release()}, Node ${process.version}; the design load in two windows of ${SECONDS} s per row (the first paced and followed by a reader, the second vegeta's, the 202 alone) after ${WARMUP_SECONDS} s of warm-up, WORKERS=2, ${ROUNDS} rounds${COMPARE === undefined ? '' : `; compared build ${COMPARE}`}`,
);
console.log(
  '| shape | case | round | 202 p50 ms | 202 p99 ms | non-202 | visible to read_committed p50 / p99 / max ms | commit after the interval p50 / p99 ms | points found / accepted |',
);
console.log('|---|---|---|---|---|---|---|---|---|');
const rows: Row[] = [];
for (let round = 1; round <= ROUNDS; round++) {
  for (const shape of SHAPES) {
    for (const which of roundOrder(CASES, round)) {
      const r = await measure(shape, which, round);
      rows.push(r);
      const non202 = r.report.requests - (r.report.status_codes['202'] ?? 0);
      console.log(
        `| ${r.shape} | ${r.case} | ${round} | ${ms(r.report.latencies['50th'])} | ${ms(r.report.latencies['99th'])} | ${non202} | ${r.visible.p50} / ${r.visible.p99} / ${r.visible.max} | ${r.commit === null ? '-' : `${r.commit.p50} / ${r.commit.p99}`} | ${r.found} / ${r.accepted} |`,
      );
    }
  }
}
console.log('\nmedians over the rounds, ms:');
for (const shape of SHAPES) {
  const of = (which: Case, f: (r: Row) => number) => median(rows.filter((r) => r.shape === shape && r.case === which).map(f));
  const line = (which: Case) =>
    `${which}: 202 p99 ${ms(of(which, (r) => r.report.latencies['99th']))}, visible p99 ${of(which, (r) => r.visible.p99)}${which.startsWith('exactly once') ? `, commit p50 / p99 ${of(which, (r) => r.commit!.p50)} / ${of(which, (r) => r.commit!.p99)}` : ''}`;
  console.log(`  ${shape}: ${CASES.map(line).join('; ')}`);
}
const wrong = rows.filter((r) => r.found !== r.accepted);
if (wrong.length > 0) {
  console.log(
    `rows whose topic does not hold every accepted point once: ${wrong.map((r) => `${r.shape} ${r.case} round ${r.round}: ${r.found} / ${r.accepted}`).join('; ')}`,
  );
  process.exitCode = 1;
}
