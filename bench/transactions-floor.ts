// `make bench-transactions-floor`: what Kafka transactions cost the Kafka client and librdkafka
// themselves, without the service: the floor under DELIVERY=exactly-once's CPU bound (issue 46: at
// most 1.05 × the default mode per point). Bare producers with the service's settings
// (producerSettings), each in its own process, all at once, each handed TXF_RATE (5,000) one-point
// requests a second, one produceBatch() call each with its acknowledgements counted per tag and
// polled every 10 ms, as bench-cpu's one worker is at its 1-point row (CPU_RATE 5,000):
//   - the default mode, twice (an A/A pair: how far two identical processes read apart);
//   - exactly once: a transactional producer, a transaction begun, TRANSACTION_COMMIT_INTERVAL_MS
//     (each of TXF_COMMIT_MS, default 100 and 1000) of requests produced in it, then committed; what
//     comes while a commit is under way is produced as the next transaction opens, as the service does.
// CPU per message of each process (every thread, process.cpuUsage) over TXF_SECONDS (20) after
// TXF_WARMUP_SECONDS (5), TXF_ROUNDS (2) rounds. What exactly once adds here is what the service
// cannot take away: read it against the service's own CPU per point at 1 point (make bench-cpu).
import { spawn } from 'node:child_process';
import { release } from 'node:os';
import Kafka from '@confluentinc/kafka-javascript';
import { loadConfig } from '../src/config.js';
import { producerSettings } from '../src/kafka/settings.js';
import { encodePoints } from '../src/track-point/encode.js';
import { validatePoints } from '../src/track-point/schema.js';
import { BROKERS, createTopic, deleteTopic, uniqueTopic } from '../support/kafka.js';
import { envNumber } from './lib/env.js';
import { cpuModel } from './lib/procfs.js';
import { benchPoints } from './lib/points.js';

const RATE = envNumber('TXF_RATE', 5_000);
const SECONDS = envNumber('TXF_SECONDS', 20);
const WARMUP_SECONDS = envNumber('TXF_WARMUP_SECONDS', 5);
const ROUNDS = envNumber('TXF_ROUNDS', 2);
const COMMIT_MS = (process.env.TXF_COMMIT_MS ?? '100,1000').split(',').map(Number);

/** One producer's figures, printed by its process as a JSON line. */
interface Measured {
  mode: string;
  /** Messages in the measured window. */
  messages: number;
  usPerMessage: number;
  /** Every message sent, and how many Kafka acknowledged by the end. */
  sent: number;
  acknowledged: number;
}

/** This process's CPU seconds, every thread (getrusage: microseconds, where /proc counts 10 ms ticks). */
function processCpuSeconds(): number {
  const used = process.cpuUsage();
  return (used.user + used.system) / 1e6;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A child: one producer, `commitMs` 0 for the default mode. */
async function producer(topic: string, commitMs: number): Promise<Measured> {
  const exactlyOnce = commitMs > 0;
  const config = loadConfig({
    ...process.env,
    MQ_BROKERS: BROKERS,
    MQ_TOPIC: topic,
    ...(exactlyOnce ? { DELIVERY: 'exactly-once', TRANSACTION_COMMIT_INTERVAL_MS: String(commitMs), INSTANCE_ID: `txf-${process.pid}` } : {}),
  });
  const settings = producerSettings(config, `bench-txf-${process.pid}`, exactlyOnce ? `bench-txf-${process.pid}` : null);
  const kafka = new Kafka.Producer(settings.global, settings.topic);
  kafka.on('event.stats', () => undefined);
  await new Promise<void>((resolve, reject) => kafka.connect({}, (err) => (err ? reject(err) : resolve())));
  let acknowledged = 0;
  const countAcks = () => {
    const acks = kafka.takeAcks();
    if (acks !== undefined) for (let i = 1; i < acks.length; i += 2) acknowledged += acks[i]!;
  };
  const poll = setInterval(() => {
    kafka.poll();
    countAcks();
  }, 10);
  const call = (f: (done: (err: unknown) => void) => void) => new Promise<void>((resolve, reject) => f((err) => (err ? reject(err) : resolve())));
  const timeout = config.exactlyOnce?.transactionTimeoutMs ?? 10_000;
  if (exactlyOnce) await call((done) => kafka.initTransactions(timeout, done));

  const valid = validatePoints(benchPoints(1, `txf-${process.pid}`));
  if (!valid.ok) throw new Error('the bench point does not validate');
  const encoded = encodePoints(valid.points);
  const request = { data: Buffer.from(encoded.data), messages: encoded.messages.slice() };
  let open = !exactlyOnce;
  let held = 0;
  let stopped = false;
  const transactions = (async () => {
    while (exactlyOnce && !stopped) {
      await call((done) => kafka.beginTransaction(done));
      open = true;
      await sleep(commitMs);
      open = false;
      await call((done) => kafka.commitTransaction(timeout, done));
    }
  })();
  const produce = (n: number) => {
    for (let i = 0; i < n; i++) kafka.produceBatch(topic, request.data, request.messages, 1, Date.now());
  };
  let sent = 0;
  const started = performance.now();
  const pacer = setInterval(() => {
    const due = Math.floor(((performance.now() - started) / 1000) * RATE) - sent;
    sent += due;
    if (!open) {
      held += due;
      return;
    }
    produce(held + due);
    held = 0;
  }, 1);
  await sleep(WARMUP_SECONDS * 1000);
  const cpu0 = processCpuSeconds();
  const sent0 = sent;
  await sleep(SECONDS * 1000);
  const cpu1 = processCpuSeconds();
  const messages = sent - sent0;
  clearInterval(pacer);
  stopped = true;
  await transactions;
  if (held > 0 && exactlyOnce) {
    await call((done) => kafka.beginTransaction(done));
    produce(held);
    await call((done) => kafka.commitTransaction(timeout, done));
  }
  await call((done) => kafka.flush(30_000, done));
  clearInterval(poll);
  countAcks();
  await new Promise<void>((resolve) => kafka.disconnect(() => resolve()));
  // A floor whose messages did not all arrive measured less work than the service does.
  if (acknowledged !== sent) throw new Error(`${acknowledged} of ${sent} messages acknowledged by Kafka`);
  return {
    mode: exactlyOnce ? `exactly once, commit every ${commitMs} ms` : 'default',
    messages,
    usPerMessage: ((cpu1 - cpu0) * 1e6) / messages,
    sent,
    acknowledged,
  };
}

/** Runs this file as a child producer; its JSON line. */
function child(topic: string, commitMs: number): Promise<Measured> {
  return new Promise((resolve, reject) => {
    const proc = spawn(process.execPath, [process.argv[1]!, 'producer', topic, String(commitMs)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    proc.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    proc.on('exit', (code) => {
      if (code !== 0) return reject(new Error(`the ${commitMs > 0 ? `exactly-once (${commitMs} ms)` : 'default'} producer exited with ${code}`));
      resolve(JSON.parse(out.trim().split('\n').pop()!) as Measured);
    });
  });
}

async function main(): Promise<void> {
  console.log(
    `bench-transactions-floor: ${RATE} one-point requests/s a producer, ${SECONDS} s after ${WARMUP_SECONDS} s, ${ROUNDS} rounds; ${cpuModel()}, Linux ${release()}, Node ${process.versions.node}`,
  );
  const topic = uniqueTopic('bench.txfloor');
  await createTopic(topic);
  const modes = [0, 0, ...COMMIT_MS];
  const sums = new Map<string, number[]>();
  try {
    for (let round = 1; round <= ROUNDS; round++) {
      // A round whose producer failed (the local broker stalls for seconds at times: a transaction's
      // messages time out) is reported and left out; the others still count.
      const settled = await Promise.allSettled(modes.map((commitMs) => child(topic, commitMs)));
      const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed !== undefined) {
        console.log(`round ${round}: left out, ${(failed.reason as Error).message}`);
        continue;
      }
      const results = settled.map((r) => (r as PromiseFulfilledResult<Measured>).value);
      const base = (results[0]!.usPerMessage + results[1]!.usPerMessage) / 2;
      console.log(`round ${round}:`);
      results.forEach((r, i) => {
        const name = i < 2 ? `${r.mode} (${i === 0 ? 'A' : "A'"})` : r.mode;
        console.log(
          `  ${name}: ${r.usPerMessage.toFixed(2)} µs CPU a message (${r.messages} messages measured; of ${r.sent} sent, ${r.acknowledged} acknowledged), ${(r.usPerMessage - base).toFixed(2)} µs over the default pair's mean`,
        );
        sums.set(name, [...(sums.get(name) ?? []), r.usPerMessage - base]);
      });
    }
  } finally {
    await deleteTopic(topic);
  }
  console.log('\nµs CPU a message over the default pair, per round:');
  for (const [name, deltas] of sums) console.log(`  ${name}: ${deltas.map((d) => d.toFixed(2)).join(', ')}`);
}

if (process.argv[2] === 'producer') {
  producer(process.argv[3]!, Number(process.argv[4]))
    .then((measured) => {
      console.log(JSON.stringify(measured));
      process.exit(0);
    })
    .catch((err: unknown) => {
      console.error(err);
      process.exit(1);
    });
} else {
  main().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
