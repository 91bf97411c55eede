// DELIVERY=exactly-once (issue 46): every point answered 202 is in Kafka once for a read_committed
// consumer, whatever happens to the processes, while a read_uncommitted reader of the same run shows
// the aborted transactions' copies (the faults did hit open transactions). The local single broker
// under steady load (8 connections, 10 points per request, each point with a sequence number).
// Beside each kill test, the same faults in the default mode (at least once) are reported, for the
// duplicates it leaves.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ACCOUNTING_HEADER, AccountedLoad, accountingRow } from '../helpers/accounting.js';
import {
  eosTopics as topics,
  exactlyOnceEnv as exactlyOnce,
  expectExactlyOnce,
  readBoth,
  reportBoth as report,
  type Readings,
} from '../helpers/exactly-once.js';
import { cpuTicks, workerPids } from '../helpers/processes.js';
import Kafka from '@confluentinc/kafka-javascript';
import { BROKERS, consumeAll, createTopic, uniqueTopic } from '../../support/kafka.js';
import { journalDir, metric, startService, until, untilJournalEmpty, type Service } from '../helpers/service.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
// How long a load runs before its first fault: both workers busy, transactions open.
const LOAD_BEFORE_FAULT_MS = 2_000;
// The whole service's kill comes this long into its load (then once it holds a transaction open).
const SERVICE_KILL_AFTER_MS = 3_000;

/** A read_committed consumer of the topic as it is written: the longest time between two reads that brought messages. */
function watchVisibility(topic: string) {
  const consumer = new Kafka.KafkaConsumer(
    { 'metadata.broker.list': BROKERS, 'group.id': `tests-visibility-${topic}`, 'enable.auto.commit': false, 'isolation.level': 'read_committed' },
    { 'auto.offset.reset': 'earliest' },
  );
  let running = true;
  let longest = 0;
  let last = 0;
  const done = (async () => {
    await new Promise<void>((resolve, reject) => consumer.connect({ timeout: 15_000 }, (err) => (err ? reject(err) : resolve())));
    consumer.assign(Array.from({ length: 6 }, (_, partition) => ({ topic, partition, offset: 0 })));
    while (running) {
      const batch = await new Promise<Kafka.Message[]>((resolve, reject) => consumer.consume(1000, (err, m) => (err ? reject(err) : resolve(m))));
      const now = Date.now();
      if (batch.length > 0) {
        if (last > 0) longest = Math.max(longest, now - last);
        last = now;
      } else await sleep(10);
    }
    await new Promise<void>((resolve) => consumer.disconnect(() => resolve()));
  })();
  return {
    async stop(): Promise<number> {
      running = false;
      await done;
      return longest;
    },
  };
}

/**
 * A partition's last stable offset, polled: a read_committed client is given it as the high watermark
 * (librdkafka's ListOffsets carries the client's isolation level); a read_uncommitted one, the high
 * watermark itself.
 */
async function stableOffsets(topic: string) {
  const connect = async (isolation: 'read_committed' | 'read_uncommitted') => {
    const client = new Kafka.KafkaConsumer({ 'metadata.broker.list': BROKERS, 'group.id': `tests-lso-${topic}`, 'isolation.level': isolation }, {});
    await new Promise<void>((resolve, reject) => client.connect({ timeout: 15_000 }, (err) => (err ? reject(err) : resolve())));
    return client;
  };
  const [committed, uncommitted] = await Promise.all([connect('read_committed'), connect('read_uncommitted')]);
  const high = (client: Kafka.KafkaConsumer, partition: number) =>
    new Promise<number>((resolve, reject) => client.queryWatermarkOffsets(topic, partition, 5_000, (err, o) => (err ? reject(err) : resolve(o.highOffset))));
  return {
    of: (partition: number) => high(committed, partition),
    highOf: (partition: number) => high(uncommitted, partition),
    close: () => Promise.all([committed, uncommitted].map((c) => new Promise<void>((resolve) => c.disconnect(() => resolve())))),
  };
}

type Offsets = Awaited<ReturnType<typeof stableOffsets>>;

/**
 * Stops the processes (SIGSTOP) once they hold a transaction open with messages on the broker: a
 * partition whose last stable offset stays put for 1.5 s, below its high watermark, while they are
 * stopped (another worker's commits move on every partition nothing holds). Stopped between two
 * transactions (a commit answered, the next one's messages not yet sent), a process holds nothing:
 * killed there, it aborts nothing, and the run cannot show that the fault hit an open transaction (a
 * CI run killed the whole service there once; a run of the frozen-worker test read 1.1 s held back).
 * Then they go on, and are stopped again 2 s later, 5 times at most.
 */
async function stopHoldingTransaction(
  pids: readonly number[],
  offsets: Offsets,
): Promise<{ stops: number; partition: number; stable: number; stoppedAt: number }> {
  const all = [0, 1, 2, 3, 4, 5];
  for (let stops = 1; stops <= 5; stops++) {
    const stoppedAt = Date.now();
    for (const pid of pids) process.kill(pid, 'SIGSTOP');
    // A commit already sent when they stopped is answered meanwhile.
    await sleep(500);
    const before = await Promise.all(all.map((p) => offsets.of(p)));
    await sleep(1_500);
    const after = await Promise.all(all.map((p) => offsets.of(p)));
    const high = await Promise.all(all.map((p) => offsets.highOf(p)));
    const partition = all.find((p) => after[p] === before[p] && high[p]! > after[p]!);
    if (partition !== undefined) return { stops, partition, stable: after[partition]!, stoppedAt };
    for (const pid of pids) process.kill(pid, 'SIGCONT');
    await sleep(2_000);
  }
  throw new Error('5 stops caught no transaction open with messages on the broker');
}

/** The worker with the most CPU so far: the kernel may have given it most connections. */
const busiest = (svc: Service) => workerPids(svc).sort((a, b) => cpuTicks(b) - cpuTicks(a))[0]!;

async function transactionCounts(svc: Service): Promise<string> {
  const committed = (await metric(svc.url, 'ingest_transactions_total{outcome="committed"}')) ?? 0;
  const aborted = (await metric(svc.url, 'ingest_transactions_total{outcome="aborted"}')) ?? 0;
  const skipped = (await metric(svc.url, 'ingest_journal_records_already_committed_total')) ?? 0;
  return `transactions since the last start: ${committed} committed, ${aborted} aborted; journal records already committed, not produced again: ${skipped}`;
}

/**
 * Every worker listening before the load's keep-alive connections are made: a worker initializes its
 * transactions before it listens, and the first one ready would otherwise get them all.
 */
async function everyWorkerListening(svc: Service): Promise<void> {
  await until('every worker listening', async () => svc.output.some((l) => l.includes('"msg":"service listening"')), 15_000);
}

/**
 * A 2-worker service killed whole (its process group) under load, from SERVICE_KILL_AFTER_MS on once it
 * holds a transaction open (stopHoldingTransaction), then started again on the
 * same journal with `again` on top of its settings; once its journals are committed, the topic read both ways.
 */
async function killServiceAndStartAgain(name: string, again: Record<string, string>): Promise<{ second: Service; r: Readings }> {
  const t = await topics(name);
  const env = exactlyOnce(t, { WORKERS: '2', JOURNAL_DIR: journalDir() });
  const first = await startService(env, { ownProcessGroup: true });
  await everyWorkerListening(first);
  const load = new AccountedLoad(first.url, { connections: 8, pointsPerRequest: 10 });
  load.start();
  await sleep(SERVICE_KILL_AFTER_MS);
  const offsets = await stableOffsets(t.MQ_TOPIC);
  const { stops } = await stopHoldingTransaction([-first.proc.pid!], offsets);
  process.kill(-first.proc.pid!, 'SIGKILL');
  await offsets.close();
  await first.exited;
  await load.stop();
  console.log(`stops of the service until one caught a transaction open: ${stops}`);
  const second = await startService({ ...env, ...again, LISTEN_ADDR: `127.0.0.1:${first.port}` });
  await untilJournalEmpty(second, 'the journals to be committed whole');
  return { second, r: await readBoth(t.MQ_TOPIC, load) };
}

/** The journal identity each worker's start line names. */
function startedJournals(svc: Service): string[] {
  return svc.output.filter((l) => l.includes('"msg":"worker started"')).map((l) => (JSON.parse(l) as { journal: string }).journal);
}

/**
 * Three kills of the busiest worker under load, each once its replacement has taken load for 2 s; with
 * exactly once (`eosTopic`), each while it holds a transaction open.
 */
async function killWorkersThrice(svc: Service, load: AccountedLoad, eosTopic: string | null): Promise<void> {
  load.start();
  await sleep(LOAD_BEFORE_FAULT_MS);
  const offsets = eosTopic === null ? null : await stableOffsets(eosTopic);
  for (let kill = 0; kill < 3; kill++) {
    const victim = busiest(svc);
    await sleep(1_000);
    if (offsets !== null) await stopHoldingTransaction([victim], offsets);
    process.kill(victim, 'SIGKILL');
    await until('a replacement worker', async () => workerPids(svc).length === 2 && !workerPids(svc).includes(victim), 15_000);
    await sleep(2_000);
  }
  await offsets?.close();
  await load.stop();
}

describe('DELIVERY=exactly-once on the local broker, 2 workers', () => {
  // The workers once each created the identity of a fresh directory at the same moment: one failed
  // to start (its temporary file renamed away by the other), or both started with ids of their own.
  it('a fresh JOURNAL_DIR started with 4 workers, three times: every worker names the one identity the directory keeps', { timeout: 120_000 }, async () => {
    const t = await topics('eos-identity');
    for (let start = 0; start < 3; start++) {
      const dir = journalDir();
      const svc = await startService(exactlyOnce(t, { WORKERS: '4', JOURNAL_DIR: dir }));
      await until('4 workers started', async () => startedJournals(svc).length === 4, 15_000);
      const kept = readFileSync(join(dir, 'journal.id'), 'utf8').trim();
      expect(startedJournals(svc)).toEqual([kept, kept, kept, kept]);
      expect(await svc.stop()).toBe(0);
    }
  });

  it('kill -9 of a worker three times under load: every 202 once for read_committed (at least once beside it: duplicates)', { timeout: 300_000 }, async () => {
    const t = await topics('eos-kill-worker');
    const svc = await startService(exactlyOnce(t, { WORKERS: '2' }));
    await everyWorkerListening(svc);
    const load = new AccountedLoad(svc.url, { connections: 8, pointsPerRequest: 10 });
    await killWorkersThrice(svc, load, t.MQ_TOPIC);
    await untilJournalEmpty(svc, 'the journals to be committed whole');
    const r = await readBoth(t.MQ_TOPIC, load);
    report('DELIVERY=exactly-once, kill -9 of the busiest worker three times', r, await transactionCounts(svc));
    expect(await svc.stop()).toBe(0);

    // The same faults at least once: nothing lost, and the duplicates exactly-once removes.
    const plain = await createTopic(uniqueTopic('eos-kill-worker-plain'));
    const before = await startService({ MQ_TOPIC: plain, WORKERS: '2' });
    const plainLoad = new AccountedLoad(before.url, { connections: 8, pointsPerRequest: 10 });
    await killWorkersThrice(before, plainLoad, null);
    await untilJournalEmpty(before, 'the journals to be produced whole');
    const p = plainLoad.account(await consumeAll(plain, { expected: plainLoad.accepted, timeoutMs: 90_000, toEnd: true }));
    console.log(`${ACCOUNTING_HEADER}\n${accountingRow('DELIVERY=at-least-once (the default), the same three kills', p)}`);
    expect(p.lost).toBe(0);
    expect(await before.stop()).toBe(0);

    expectExactlyOnce(r, 10_000);
  });

  it('kill -9 of the whole service under load, then started again on its journal: every 202 once', { timeout: 180_000 }, async () => {
    const { second, r } = await killServiceAndStartAgain('eos-kill-service', {});
    report(
      `DELIVERY=exactly-once, kill -9 of the service from ${SERVICE_KILL_AFTER_MS / 1000} s on, a transaction open, started again`,
      r,
      await transactionCounts(second),
    );
    expect(await second.stop()).toBe(0);
    expectExactlyOnce(r, 5_000);
  });

  it(
    "kill -9 of a 2-worker service, started again with WORKERS=1: slot 0 fences slot 1's transactional.id and commits its journal, every 202 once",
    { timeout: 180_000 },
    async () => {
      const { second, r } = await killServiceAndStartAgain('eos-shrink', { WORKERS: '1' });
      expect(second.output.join('\n')).toMatch(/fenced the transactional.id of a slot whose journal files this worker took over/);
      report(
        `DELIVERY=exactly-once, kill -9 of the 2-worker service from ${SERVICE_KILL_AFTER_MS / 1000} s on, a transaction open, started again with WORKERS=1`,
        r,
        await transactionCounts(second),
      );
      expect(await second.stop()).toBe(0);
      expectExactlyOnce(r, 5_000);
    },
  );

  it(
    'a worker frozen past TRANSACTION_TIMEOUT_MS, then woken: its transaction aborted by the broker, which holds read_committed consumers back meanwhile; produced again, every 202 once',
    { timeout: 180_000 },
    async () => {
      const t = await topics('eos-freeze-worker');
      const svc = await startService(exactlyOnce(t, { WORKERS: '2', TRANSACTION_TIMEOUT_MS: '3000' }));
      await everyWorkerListening(svc);
      const load = new AccountedLoad(svc.url, { connections: 8, pointsPerRequest: 10, requestTimeoutMs: 60_000 });
      // A read_committed consumer beside it, reported: the longest time it read nothing. Nothing after
      // the open transaction's first message can be read until the broker aborts it, but a consumer
      // that lags reads what came before meanwhile (a run read a 1.8 s gap for a 6.9 s hold), so the
      // hold is asserted as the broker keeps it: the partition's last stable offset, below.
      const watcher = watchVisibility(t.MQ_TOPIC);
      load.start();
      await sleep(LOAD_BEFORE_FAULT_MS);
      const victim = busiest(svc);
      await sleep(1_000);
      // Frozen once it holds a transaction open (stopHoldingTransaction): one of its partitions' last
      // stable offset then stays put.
      const lso = await stableOffsets(t.MQ_TOPIC);
      const { stops: freezes, partition, stable, stoppedAt: frozenAt } = await stopHoldingTransaction([victim], lso);
      // How long consumers are held back, as the broker holds them: until that partition's last stable
      // offset moves on, polled while the worker stays frozen (10 s in all). The broker aborts the
      // transaction after its timeout, and looks for timed-out transactions every second
      // (transaction.abort.timed.out.transaction.cleanup.interval.ms, scripts/kafka.sh).
      let heldMs = -1;
      while (Date.now() - frozenAt < 10_000) {
        await sleep(200);
        if (heldMs < 0 && (await lso.of(partition)) !== stable) heldMs = Date.now() - frozenAt;
      }
      await lso.close();
      process.kill(victim, 'SIGCONT');
      await sleep(3_000);
      await load.stop();
      await untilJournalEmpty(svc, 'the journals to be committed whole');
      const readGapMs = await watcher.stop();
      const r = await readBoth(t.MQ_TOPIC, load);
      report(
        'DELIVERY=exactly-once, the busiest worker frozen 10 s (transaction timeout 3 s)',
        r,
        `${await transactionCounts(svc)}; partition ${partition}'s last stable offset held ${heldMs} ms after the freeze; a read_committed consumer's longest gap between reads ${readGapMs} ms; freezes until one caught a transaction open: ${freezes}`,
      );
      // Held until the broker aborted the transaction: its timeout (3 s from its start), plus up to the
      // check interval and the markers' write; not until the worker woke (10 s: -1).
      expect(heldMs).toBeGreaterThan(2_000);
      expect(heldMs).toBeLessThan(8_000);
      expect(await svc.stop()).toBe(0);
      expectExactlyOnce(r, 5_000);
    },
  );

  it(
    'a second process with the same INSTANCE_ID fences the first, which stops (exit 7); started again, its journal gives every 202 once',
    { timeout: 180_000 },
    async () => {
      const t = await topics('eos-fenced');
      const env = exactlyOnce(t, { WORKERS: '1', STANDBY_WORKER: '0' });
      const dir = journalDir();
      const first = await startService({ ...env, JOURNAL_DIR: dir });
      const load = new AccountedLoad(first.url, { connections: 4, pointsPerRequest: 10 });
      load.start();
      await sleep(3_000);
      // Another host's process under the same identity: another journal directory.
      const second = await startService(env);
      const code = await Promise.race([first.exited, sleep(30_000).then(() => 'still running' as const)]);
      await load.stop();
      expect(code).toBe(7);
      expect(first.output.join('\n')).toMatch(/fenced: another process took this slot's transactional.id/);
      expect(await second.stop()).toBe(0);
      // What the fenced process accepted and had not committed stays in its journal, for its next start.
      const again = await startService({ ...env, JOURNAL_DIR: dir });
      await untilJournalEmpty(again, 'the journal to be committed whole');
      const r = await readBoth(t.MQ_TOPIC, load);
      report('DELIVERY=exactly-once, the same INSTANCE_ID started elsewhere at 3 s; the first started again', r, await transactionCounts(again));
      expect(await again.stop()).toBe(0);
      expect(r.committed.lost).toBe(0);
      expect(r.committed.duplicated).toBe(0);
      expect(r.committed.deliveredAfterError).toBe(0);
    },
  );
});
