// DELIVERY=exactly-once, the one crash a kill -9 under load almost never hits: after a transaction
// is committed and before its records are marked done in the journal. The real broker, the real
// transactional producer; the "crash" is the process going no further once commitTransaction
// returned. The slot's next holder must read the committed position and skip those records, produce
// the ones after them, and a read_committed consumer must find every point once.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig, transactionalId, type Config } from '../../src/config.js';
import { diskFiles } from '../../src/journal/files.js';
import { journalIdentity } from '../../src/journal/journal-id.js';
import { readPositions } from '../../src/kafka/positions.js';
import { KafkaProducer, type ProducedBatch } from '../../src/kafka/producer.js';
import type { KafkaTransactions } from '../../src/kafka/transactional-producer.js';
import { producerSettings } from '../../src/kafka/settings.js';
import { createWorkerMetrics, type WorkerMetrics } from '../../src/metrics/metrics.js';
import { encodePoints } from '../../src/track-point/encode.js';
import type { TransactionalProducer } from '../../src/kafka/transactional-producer.js';
import { Ledger } from '../../src/write-ahead/ledger.js';
import { Transactions } from '../../src/write-ahead/transactions.js';
import { BROKERS, consumeAll, createTopic, uniqueTopic } from '../../support/kafka.js';
import { openJournal } from '../helpers/journal.js';
import { startService, until } from '../helpers/service.js';

const KAFKA_SH = fileURLToPath(new URL('../../scripts/kafka.sh', import.meta.url));
/** A producer here reports to nobody: the transactions under test read it directly. */
const noEvents = { onFailed: () => undefined, onAccepting: () => undefined, onFatal: () => undefined };
const quiet = pino({ level: 'silent' }, new Writable({ write: (_c, _e, done) => done() }));
const dir = mkdtempSync(join(tmpdir(), 'eos-positions-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const request = (r: number) =>
  encodePoints(Array.from({ length: 10 }, (_, i) => ({ container_id: `r${r}-p${i}`, lat: 1, lon: 2, timestamp: '2024-05-01T12:00:00Z', speed: 0 })));

/** A fault injected into the first transaction: its commit answered "abort", or its position refused by librdkafka's queue. */
type FirstTransactionFault = 'commit requires an abort' | 'position refused' | null;

/** A fresh points topic and its compacted positions topic, and the settings of slot 0 in exactly-once mode over them (`more` on top). */
async function exactlyOnceTopic(name: string, more: Record<string, string> = {}): Promise<{ topic: string; config: Config }> {
  const topic = await createTopic(uniqueTopic(name));
  const positionsTopic = `${topic}.positions`;
  execFileSync(KAFKA_SH, ['topic', positionsTopic, '1', 'cleanup.policy=compact'], { stdio: 'ignore' });
  const config = loadConfig({
    MQ_BROKERS: BROKERS,
    MQ_TOPIC: topic,
    JOURNAL_DIR: dir,
    DELIVERY: 'exactly-once',
    INSTANCE_ID: `unit-${topic.slice(-8)}`,
    MQ_POSITIONS_TOPIC: positionsTopic,
    ...more,
  });
  return { topic, config };
}

/** How a worker reads the committed positions at its start (read_committed), for Transactions.start. */
const readCommittedPositions = (config: Config) => (keys: string[]) =>
  readPositions({ brokers: BROKERS, topic: config.exactlyOnce!.positionsTopic, keys, connection: {}, timeoutMs: 20_000 });

/** Slot 0's transactions over `ledger` (its journal) through `producer`, as a worker makes them; a fatal error fails the test. */
function slotTransactions(config: Config, ledger: Ledger, producer: TransactionalProducer, metrics: WorkerMetrics): Transactions {
  const exactlyOnce = config.exactlyOnce!;
  return new Transactions({
    ledger,
    journalId: journalIdentity(diskFiles, dir),
    producer,
    settings: exactlyOnce,
    keyOf: (slot) => transactionalId(exactlyOnce, slot),
    log: quiet,
    metrics,
    onFatal: () => {
      throw new Error('unexpected fatal error');
    },
  });
}

/** One process's slot 0: its journal, its transactional producer, its transactions (polled as the worker does). */
async function holder(config: Config, metrics: WorkerMetrics, crashAfterCommit: boolean, fault: FirstTransactionFault = null) {
  const exactlyOnce = config.exactlyOnce!;
  const { journal } = openJournal({ dir, maxBytes: config.journalMaxBytes, sync: 'process' });
  const producer = new KafkaProducer(config, quiet, metrics, producerSettings(config, 'eos-positions', transactionalId(exactlyOnce, 0)), noEvents);
  producer.start();
  expect(await producer.whenAccepting(20_000)).toBe(true);
  const calls = producer.transactions!;
  let commits = 0;
  let positions = 0;
  // The process "dies" the moment its first commit returned: nothing after it runs.
  const transactional: TransactionalProducer = Object.assign(Object.create(calls) as KafkaTransactions, {
    // As librdkafka's produce answers when its queue is full: taken, none.
    produceTo: (topic: string, batch: ProducedBatch) => (fault === 'position refused' && positions++ === 0 ? false : calls.produceTo(topic, batch)),
    commitTransaction: async (timeoutMs: number) => {
      if (fault === 'commit requires an abort' && commits === 0) {
        commits++;
        // What librdkafka answers when the transaction must be aborted (a message that failed in it).
        throw Object.assign(new Error('injected: the transaction requires an abort'), { isTxnRequiresAbort: true });
      }
      await calls.commitTransaction(timeoutMs);
      commits++;
      if (crashAfterCommit) await new Promise(() => undefined);
    },
  });
  const ledger = new Ledger(journal);
  const transactions = slotTransactions(config, ledger, transactional, metrics);
  await transactions.start([0], readCommittedPositions(config));
  const poll = setInterval(() => transactions.pass(), 10);
  return { journal, ledger, producer, transactions, commits: () => commits, stop: () => clearInterval(poll) };
}

function accept(ledger: Ledger, transactions: Transactions | null, r: number): void {
  const batch = request(r);
  const record = ledger.append(batch, Date.now());
  transactions?.add(record, batch, Date.now());
}

describe('DELIVERY=exactly-once: a crash between the commit and the journal marks', () => {
  it('the next holder skips the records the committed position covers and produces the rest: each point once', { timeout: 120_000 }, async () => {
    const { topic, config } = await exactlyOnceTopic('eos-positions', { TRANSACTION_COMMIT_INTERVAL_MS: '200' });

    const first = await holder(config, createWorkerMetrics('first'), true);
    for (let r = 0; r < 5; r++) accept(first.ledger, first.transactions, r);
    await until('the first transaction committed', async () => first.commits() === 1, 20_000);
    // Accepted after that commit began, before the crash: in the journal, in no transaction.
    for (let r = 5; r < 7; r++) accept(first.ledger, null, r);
    first.stop();
    expect(first.journal.records).toBe(7); // nothing was marked done

    const metrics = createWorkerMetrics('second');
    const second = await holder(config, metrics, false);
    await until('the journal committed whole', async () => second.journal.records === 0 && !second.journal.recovering, 30_000);
    second.stop();
    expect((await metrics.recoveredCommitted.get()).values[0]?.value).toBe(5);

    const messages = await consumeAll(topic, { expected: 70, timeoutMs: 30_000, idleMs: 2_000, isolation: 'read_committed' });
    const keys = messages.map((m) => m.key).sort();
    expect(keys).toEqual(
      Array.from({ length: 7 }, (_, r) => Array.from({ length: 10 }, (_, i) => `r${r}-p${i}`))
        .flat()
        .sort(),
    );
    await Promise.all([first.producer.disconnect(2_000), second.producer.disconnect(2_000)]);
  });

  it('a positions topic that does not exist stops the start (exit 2), saying how to create it', { timeout: 60_000 }, async () => {
    const topic = await createTopic(uniqueTopic('eos-no-positions'));
    const svc = await startService({ MQ_TOPIC: topic, DELIVERY: 'exactly-once', MQ_POSITIONS_TOPIC: `${topic}.missing` }, { waitFor: 'nothing' });
    expect(await svc.exited).toBe(2);
    expect(svc.output.join('\n')).toContain(`the positions topic ${topic}.missing (MQ_POSITIONS_TOPIC) does not exist`);
  });

  it.each(['commit requires an abort', 'position refused'] as const)(
    '%s: the transaction is aborted and its records, read back from the journal, committed in the next one, each point once',
    { timeout: 120_000 },
    async (fault) => {
      const { topic, config } = await exactlyOnceTopic('eos-abort', { TRANSACTION_COMMIT_INTERVAL_MS: '200' });
      const metrics = createWorkerMetrics('abort');
      const h = await holder(config, metrics, false, fault);
      for (let r = 0; r < 5; r++) accept(h.ledger, h.transactions, r);
      await until('the journal committed whole', async () => h.journal.records === 0, 30_000);
      h.stop();
      const outcome = async (o: string) => (await metrics.transactions.get()).values.find((v) => v.labels.outcome === o)?.value ?? 0;
      expect([await outcome('aborted'), await outcome('committed')]).toEqual([1, 1]);
      // The commit's duration is observed for the committed transaction only.
      const commits = (await metrics.transactionCommit.get()).values.find((v) => v.metricName === 'ingest_transaction_commit_seconds_count')?.value;
      expect(commits).toBe(1);
      const keys = (isolation: 'read_committed' | 'read_uncommitted') =>
        consumeAll(topic, { expected: isolation === 'read_committed' ? 50 : 100, timeoutMs: 30_000, idleMs: 2_000, isolation }).then((m) =>
          m.map((x) => x.key).sort(),
        );
      const all = Array.from({ length: 5 }, (_, r) => Array.from({ length: 10 }, (_, i) => `r${r}-p${i}`))
        .flat()
        .sort();
      expect(await keys('read_committed')).toEqual(all);
      // The aborted transaction's copies are in the log: a read_uncommitted reader sees each point twice.
      expect(await keys('read_uncommitted')).toEqual([...all, ...all].sort());
      await h.producer.disconnect(2_000);
    },
  );

  // A worker stopped as it starts: its drain found no transaction and disconnected the producer while
  // initTransactions waited on a thread of libuv's pool. Destroying the client under that call made
  // it time out, then abort the process in librdkafka (a CI run of the 4-worker start test: SIGABRT,
  // "rd_kafka_txn_curr_api_return0: Assertion ... failed").
  it(
    'a shutdown while initTransactions is under way: the disconnect waits for it, which succeeds; the start returns with the slot not ready',
    { timeout: 60_000 },
    async () => {
      const { config } = await exactlyOnceTopic('eos-stop-at-start');
      const exactlyOnce = config.exactlyOnce!;
      const { journal } = openJournal({ dir, maxBytes: config.journalMaxBytes, sync: 'process' });
      const producer = new KafkaProducer(
        config,
        quiet,
        createWorkerMetrics('stop-at-start'),
        producerSettings(config, 'eos-stop-at-start', transactionalId(exactlyOnce, 0)),
        noEvents,
      );
      producer.start();
      expect(await producer.whenAccepting(20_000)).toBe(true);
      const calls = producer.transactions!;
      const inits: string[] = [];
      const watched: TransactionalProducer = Object.assign(Object.create(calls) as KafkaTransactions, {
        initTransactions: (timeoutMs: number) =>
          calls.initTransactions(timeoutMs).then(
            () => void inits.push('ok'),
            (err: Error) => {
              inits.push(err.message);
              throw err;
            },
          ),
      });
      const transactions = slotTransactions(config, new Ledger(journal), watched, createWorkerMetrics('stop-at-start'));
      const started = transactions.start([0], readCommittedPositions(config));
      // The worker's shutdown, as it runs when the signal comes during the start.
      expect(await transactions.drain(Date.now() + 10_000)).toBe(0);
      await producer.disconnect(10_000);
      await started;
      expect(inits).toEqual(['ok']);
      expect(transactions.ready).toBe(false);
    },
  );

  // A graceful stop commits what is open and marks its records done before the journal closes: a
  // restart then finds nothing to recover (records left would be skipped by the position, but read
  // back and counted as recovered).
  it('a drain with 2,000 records in the open transaction commits them and leaves every record marked done', { timeout: 120_000 }, async () => {
    const { config } = await exactlyOnceTopic('eos-drain', { TRANSACTION_COMMIT_INTERVAL_MS: '5000', TRANSACTION_MAX_POINTS: '100000' });
    const h = await holder(config, createWorkerMetrics('drain'), false);
    for (let r = 0; r < 2_000; r++) accept(h.ledger, h.transactions, r);
    expect(await h.transactions.drain(Date.now() + 30_000)).toBe(0);
    expect([h.commits(), h.journal.records]).toEqual([1, 0]);
    h.stop();
    await h.producer.disconnect(2_000);
  });
});
