// DELIVERY=exactly-once's state machine (write-ahead/transactions.ts) against a fake of librdkafka's
// transaction calls, on a real journal: every state it passes through, every class of error a call
// can end with, a fence, and a transaction that outlived its timeout. What the fake answers is what
// librdkafka answers (errors flagged isRetriable, isTxnRequiresAbort, isFatal; a fence's code); the
// same machine against a real broker is exactly-once-positions.test.ts.
import Kafka from '@confluentinc/kafka-javascript';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import type { ExactlyOnce } from '../../../src/config.js';
import type { Journal } from '../../../src/journal/journal.js';
import type { JournalPosition } from '../../../src/kafka/positions.js';
import type { ProducedBatch } from '../../../src/kafka/producer.js';
import type { TransactionRefusal } from '../../../src/kafka/transactional-producer.js';
import { createWorkerMetrics, type WorkerMetrics } from '../../../src/metrics/metrics.js';
import { encodePoints } from '../../../src/track-point/encode.js';
import type { TransactionalProducer } from '../../../src/kafka/transactional-producer.js';
import { Transactions } from '../../../src/write-ahead/transactions.js';
import { Ledger } from '../../../src/write-ahead/ledger.js';
import { openJournal } from '../../helpers/journal.js';

const quiet = pino({ level: 'silent' }, new Writable({ write: (_c, _e, done) => done() }));
const JOURNAL_ID = 'unit-journal';
const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** librdkafka's errors, flagged as it flags them. */
const retriable = () => Object.assign(new Error('Broker: Coordinator load in progress'), { isRetriable: true });
const abortable = () => Object.assign(new Error('Broker: a message of the transaction failed'), { isTxnRequiresAbort: true });
const fatal = () => Object.assign(new Error('Broker: Invalid producer epoch'), { isFatal: true });
const fenced = () =>
  Object.assign(new Error('Local: This instance has been fenced by a newer instance'), { isFatal: true, code: Kafka.CODES.ERRORS.ERR__FENCED });
const failed = () => new Error('Local: Timed out');

type Call = 'init' | 'begin' | 'commit' | 'abort';

/** librdkafka's transaction calls, scripted: each call takes the next outcome given for it (none: it succeeds). */
class FakeCalls implements TransactionalProducer {
  readonly calls: Call[] = [];
  /** Messages taken, per topic. */
  readonly taken = new Map<string, number>();
  readonly outcomes: Record<Call, (Error | Promise<void>)[]> = { init: [], begin: [], commit: [], abort: [] };
  /** How many messages produceRest takes per call, and whether produceTo takes a position. */
  takes = Infinity;
  positionsTaken = true;
  refused: TransactionRefusal | null = null;

  initTransactions(): Promise<void> {
    return this.call('init');
  }
  beginTransaction(): Promise<void> {
    return this.call('begin');
  }
  commitTransaction(): Promise<void> {
    return this.call('commit');
  }
  abortTransaction(): Promise<void> {
    this.refused = null;
    return this.call('abort');
  }
  produceRest(batch: ProducedBatch, from: number): number {
    if (this.refused !== null) return 0;
    const n = Math.min(batch.count - from, this.takes);
    this.taken.set('points', (this.taken.get('points') ?? 0) + n);
    return n;
  }
  produceTo(topic: string): boolean {
    if (!this.positionsTaken) return false;
    this.taken.set(topic, (this.taken.get(topic) ?? 0) + 1);
    return true;
  }
  refusal(): TransactionRefusal | null {
    return this.refused;
  }
  takeAcks(): Uint32Array | undefined {
    return undefined;
  }
  private call(name: Call): Promise<void> {
    this.calls.push(name);
    const outcome = this.outcomes[name].shift();
    return outcome instanceof Error ? Promise.reject(outcome) : (outcome ?? Promise.resolve());
  }
}

/** A promise the test settles: a call under way. */
function deferred(): { promise: Promise<void>; resolve: () => void; reject: (err: Error) => void } {
  let resolve!: () => void;
  let reject!: (err: Error) => void;
  const promise = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)));
  return { promise, resolve, reject };
}

async function until(what: string, condition: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const request = (r: number, n = 2) =>
  encodePoints(Array.from({ length: n }, (_, i) => ({ container_id: `r${r}-${i}`, lat: 1, lon: 2, timestamp: '2024-05-01T12:00:00Z', speed: 0 })));

interface Setup {
  dir?: string;
  settings?: Partial<ExactlyOnce>;
  positions?: Map<string, JournalPosition>;
}

function setup({ dir = mkdtempSync(join(tmpdir(), 'transactions-unit-')), settings = {}, positions = new Map() }: Setup = {}) {
  dirs.push(dir);
  const { journal } = openJournal({ dir, maxBytes: 2 ** 30, sync: 'process' });
  const calls = new FakeCalls();
  const metrics = createWorkerMetrics('unit');
  const fatals: boolean[] = [];
  const ledger = new Ledger(journal);
  const transactions = new Transactions({
    ledger,
    journalId: JOURNAL_ID,
    producer: calls,
    settings: { instance: 'unit', positionsTopic: 'positions', commitIntervalMs: 20, maxPoints: 1_000, transactionTimeoutMs: 5_000, ...settings },
    keyOf: (slot) => `track-ingest.unit.${slot}`,
    log: quiet,
    metrics,
    onFatal: (f) => void fatals.push(f),
  });
  // The sink's poll.
  const poll = setInterval(() => transactions.pass(), 5);
  afterEach(() => clearInterval(poll));
  const start = () => transactions.start([0], () => Promise.resolve(positions));
  const accept = (r: number, n = 2) => {
    const batch = request(r, n);
    transactions.add(ledger.append(batch, Date.now()), batch, Date.now());
  };
  return { journal, calls, metrics, fatals, transactions, start, accept, stop: () => clearInterval(poll) };
}

async function outcomes(metrics: WorkerMetrics): Promise<Record<string, number>> {
  return Object.fromEntries((await metrics.transactions.get()).values.map((v) => [String(v.labels.outcome), v.value]));
}

const emptied = (journal: Journal) => journal.records === 0 && !journal.recovering;

describe('Transactions: the start', () => {
  it('starting: not ready until initTransactions succeeded and the positions are read; then ready, nothing produced', async () => {
    const { transactions, calls, start } = setup();
    const init = deferred();
    calls.outcomes.init.push(init.promise);
    const started = start();
    expect(transactions.ready).toBe(false);
    init.resolve();
    await started;
    expect([transactions.ready, calls.calls, calls.taken.size]).toEqual([true, ['init'], 0]);
  });

  it('an init that fails without a class is tried again, up to three attempts; the third failure stops the start, naming the transactional.id', async () => {
    const twice = setup();
    twice.calls.outcomes.init.push(failed(), retriable());
    await twice.start();
    expect([twice.transactions.ready, twice.calls.calls]).toEqual([true, ['init', 'init', 'init']]);

    const thrice = setup();
    thrice.calls.outcomes.init.push(failed(), failed(), failed());
    await expect(thrice.start()).rejects.toThrow(
      /cannot initialize Kafka transactions for track-ingest\.unit\.0 \(Local: Timed out\): DELIVERY=exactly-once needs brokers with transactions/,
    );
    expect(thrice.transactions.ready).toBe(false);
  });

  it('a fatal init error stops the start at once', async () => {
    const { calls, start } = setup();
    calls.outcomes.init.push(fatal());
    await expect(start()).rejects.toThrow(/Invalid producer epoch/);
    expect(calls.calls).toEqual(['init']);
  });
});

describe('Transactions: begin, open, end', () => {
  it("idle → beginning → open → ending: records accepted while it begins go into the transaction, with the slot's position; done once committed", async () => {
    const { journal, calls, metrics, transactions, start, accept } = setup();
    await start();
    const begin = deferred();
    calls.outcomes.begin.push(begin.promise);
    accept(1);
    accept(2); // while beginning
    expect(calls.taken.get('points')).toBeUndefined();
    begin.resolve();
    await until('the commit', () => emptied(journal));
    expect(calls.calls).toEqual(['init', 'begin', 'commit']);
    expect([calls.taken.get('points'), calls.taken.get('positions')]).toEqual([4, 1]);
    expect(await outcomes(metrics)).toEqual({ committed: 1 });
    expect(transactions.heldPoints).toBe(0);
  });

  it('records accepted while a commit is under way wait for the next transaction, which restates the committed position first', async () => {
    const { journal, calls, metrics, start, accept } = setup();
    await start();
    const commit = deferred();
    calls.outcomes.commit.push(commit.promise);
    accept(1);
    await until('the first commit under way', () => calls.calls.includes('commit'));
    accept(2); // while ending
    commit.resolve();
    await until('both committed', () => emptied(journal));
    expect(calls.calls).toEqual(['init', 'begin', 'commit', 'begin', 'commit']);
    // Two positions at the ends, one restated as the second opened.
    expect(calls.taken.get('positions')).toBe(3);
    expect(await outcomes(metrics)).toEqual({ committed: 2 });
  });

  it('TRANSACTION_MAX_POINTS ends a transaction before TRANSACTION_COMMIT_INTERVAL_MS', async () => {
    const { journal, calls, start, accept } = setup({ settings: { commitIntervalMs: 60_000, maxPoints: 4 } });
    await start();
    accept(1);
    accept(2);
    await until('the commit', () => emptied(journal), 2_000);
    expect(calls.calls).toEqual(['init', 'begin', 'commit']);
  });

  it("librdkafka's queue full: the end waits until it took every message, then commits them all", async () => {
    const { journal, calls, start, accept } = setup();
    await start();
    calls.takes = 0;
    accept(1, 3);
    // Past TRANSACTION_COMMIT_INTERVAL_MS: the end waits for the queue.
    await new Promise((r) => setTimeout(r, 150));
    expect([calls.calls, calls.taken.get('points')]).toEqual([['init', 'begin'], 0]);
    calls.takes = 1;
    await until('the commit', () => emptied(journal));
    expect([calls.calls, calls.taken.get('points')]).toEqual([['init', 'begin', 'commit'], 3]);
  });
});

describe('Transactions: errors, by class', () => {
  it('a retriable commit error: the commit again, then done', async () => {
    const { journal, calls, metrics, start, accept } = setup();
    await start();
    calls.outcomes.commit.push(retriable());
    accept(1);
    await until('the commit', () => emptied(journal));
    expect(calls.calls).toEqual(['init', 'begin', 'commit', 'commit']);
    expect(await outcomes(metrics)).toEqual({ committed: 1 });
  });

  it('an abortable commit error: aborted, and its records produced again in the next transaction and committed', async () => {
    const { journal, calls, metrics, fatals, start, accept } = setup();
    await start();
    calls.outcomes.commit.push(abortable());
    accept(1);
    accept(2);
    await until('the commit', () => emptied(journal));
    expect(calls.calls).toEqual(['init', 'begin', 'commit', 'abort', 'begin', 'commit']);
    expect(calls.taken.get('points')).toBe(8);
    expect([await outcomes(metrics), fatals]).toEqual([{ aborted: 1, committed: 1 }, []]);
  });

  it('a message refused because the transaction failed: aborted at once, its records produced again after', async () => {
    const { journal, calls, metrics, start, accept } = setup({ settings: { commitIntervalMs: 60_000, maxPoints: 4 } });
    await start();
    const begin = deferred();
    calls.outcomes.begin.push(begin.promise);
    accept(1);
    calls.refused = 'transaction_failed';
    begin.resolve();
    await until('the abort', () => calls.calls.includes('abort'));
    accept(2); // reaches TRANSACTION_MAX_POINTS in the next transaction
    await until('the commit', () => emptied(journal), 2_000);
    expect(calls.calls).toEqual(['init', 'begin', 'abort', 'begin', 'commit']);
    expect(await outcomes(metrics)).toEqual({ aborted: 1, committed: 1 });
  });

  it("a position librdkafka's queue did not take: the transaction is aborted, not committed without it", async () => {
    const { journal, calls, start, accept } = setup();
    await start();
    calls.positionsTaken = false;
    accept(1);
    await until('the abort', () => calls.calls.includes('abort'));
    calls.positionsTaken = true;
    await until('the commit', () => emptied(journal));
    expect(calls.calls).toEqual(['init', 'begin', 'abort', 'begin', 'commit']);
  });

  it.each([
    ['a fatal commit error', 'commit', fatal, false],
    ['a commit error without a class', 'commit', failed, false],
    ['a fence', 'commit', fenced, true],
    ['a failed begin', 'begin', failed, false],
  ] as const)('%s (%s): the worker ends, fenced only by a fence, no longer ready, and the records stay in the journal', async (_what, call, error, isFence) => {
    const { journal, calls, fatals, transactions, start, accept } = setup();
    await start();
    calls.outcomes[call].push(error());
    accept(1);
    await until('the fatal error', () => fatals.length > 0);
    expect([fatals, transactions.ready, journal.records]).toEqual([[isFence], false, 1]);
  });

  it('an abort that fails: the worker ends', async () => {
    const { calls, fatals, start, accept } = setup();
    await start();
    calls.outcomes.commit.push(abortable());
    calls.outcomes.abort.push(failed());
    accept(1);
    await until('the fatal error', () => fatals.length > 0);
    expect([calls.calls, fatals]).toEqual([['init', 'begin', 'commit', 'abort'], [false]]);
  });

  it("a fence after the transaction outlived TRANSACTION_TIMEOUT_MS is the broker's: the worker ends as not fenced", async () => {
    const { calls, fatals, transactions, start, accept } = setup({ settings: { commitIntervalMs: 10, transactionTimeoutMs: 100 } });
    await start();
    const commit = deferred();
    calls.outcomes.commit.push(commit.promise);
    accept(1);
    await until('the commit under way', () => calls.calls.includes('commit'));
    await new Promise((r) => setTimeout(r, 120));
    expect(transactions.timedOut()).toBe(true);
    commit.reject(fenced());
    await until('the fatal error', () => fatals.length > 0);
    expect(fatals).toEqual([false]);
  });
});

describe('Transactions: recovery and drain', () => {
  it('what an earlier process left: done up to the committed position without being produced, the rest produced first, then what is new', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'transactions-unit-'));
    const earlier = openJournal({ dir, maxBytes: 2 ** 30, sync: 'process' }).journal;
    const records = [1, 2, 3].map((r) => earlier.append(request(r, 3), Date.now()));
    const first = records[0]!;
    const positions = new Map([['track-ingest.unit.0', { journal: JOURNAL_ID, slot: 0, seq: first.segment.seq, index: first.index }]]);
    const { journal, calls, transactions, start, accept } = setup({ dir, positions });
    expect(journal.recovering).toBe(true);
    await start();
    accept(4, 2);
    await until('the journal emptied', () => emptied(journal));
    expect(transactions.alreadyCommittedPoints).toBe(3);
    expect(calls.taken.get('points')).toBe(3 + 3 + 2);
  });

  it('drain: what is open and what waits committed before the deadline; stopped after, not ready', async () => {
    const { journal, calls, transactions, start, accept } = setup({ settings: { commitIntervalMs: 60_000 } });
    await start();
    accept(1);
    accept(2);
    expect(await transactions.drain(Date.now() + 5_000)).toBe(0);
    expect([calls.calls, journal.records, transactions.ready]).toEqual([['init', 'begin', 'commit'], 0, false]);
  });

  it('drain at a deadline the commit does not meet: the points not committed are counted, and stay in the journal', async () => {
    const { journal, calls, transactions, start, accept } = setup({ settings: { commitIntervalMs: 60_000 } });
    await start();
    calls.outcomes.commit.push(new Promise(() => undefined));
    accept(1);
    expect(await transactions.drain(Date.now() + 200)).toBe(2);
    expect(journal.records).toBe(1);
  });
});
