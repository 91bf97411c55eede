// A 202 survives the process (issue 29): every accepted point is in the worker's write-ahead journal
// before the answer, so killing a worker, a worker while Kafka holds its queue, or the whole service,
// and stopping it during an outage longer than SHUTDOWN_TIMEOUT_MS, lose nothing. The local single
// broker under steady load (8 connections, 10 points per request, each point with a sequence number),
// the topic read back and every point answered 202 accounted for. Duplicates (at least once, after a
// crash) and reordering across the broken connections are reported, not refused.
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { ACCOUNTING_HEADER, AccountedLoad, accountingRow, type Accounting } from '../helpers/accounting.js';
import { cpuTicks, servicePids, workerPids } from '../helpers/processes.js';
import { consumeAll, createTopic, uniqueTopic } from '../../support/kafka.js';
import { journalDir, metric, startService, until, untilJournalEmpty, type Service } from '../helpers/service.js';

const KAFKA_SH = fileURLToPath(new URL('../../scripts/kafka.sh', import.meta.url));
const kafka = (...args: string[]) =>
  execFileSync(KAFKA_SH, args, { stdio: ['ignore', 'pipe', 'inherit'] })
    .toString()
    .trim();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const walFiles = (dir: string) => readdirSync(dir).filter((n) => n.endsWith('.wal'));

let frozen = false;
function freeze(): void {
  kafka('freeze-node', 'single');
  frozen = true;
}
function thaw(): void {
  kafka('thaw-node', 'single');
  frozen = false;
}
afterAll(() => {
  // Whatever happened, the broker every other test uses answers again.
  if (frozen) thaw();
});

async function readBack(topic: string, load: AccountedLoad): Promise<Accounting> {
  return load.account(await consumeAll(topic, { expected: load.accepted, timeoutMs: 90_000, toEnd: true }));
}

/** What the journal produced again, and the possible duplicates it counted, as one line. */
async function journalCounts(svc: Service): Promise<string> {
  const restart = (await metric(svc.url, 'ingest_journal_replayed_points_total{cause="restart"}')) ?? 0;
  const retry = (await metric(svc.url, 'ingest_journal_replayed_points_total{cause="retry"}')) ?? 0;
  const duplicates = (await metric(svc.url, 'ingest_journal_possible_duplicates_total')) ?? 0;
  return `produced again from the journal: ${restart} after a restart, ${retry} after a failure; possible duplicates counted ${duplicates}`;
}

function report(scenario: string, a: Accounting, extra: string): void {
  console.log(`${ACCOUNTING_HEADER}\n${accountingRow(scenario, a)}\n(${extra})`);
}

/** The promise of the journal: every point answered 202 is in Kafka, at least once; nothing hangs. */
function expectNothingLost(a: Accounting, minAccepted: number): void {
  expect(a.accepted).toBeGreaterThan(minAccepted);
  expect(a.lost).toBe(0);
  expect(a.hangs).toBe(0);
}

/** The worker with the most CPU so far: the kernel may have given it most connections. */
const busiest = (svc: Service) => workerPids(svc).sort((a, b) => cpuTicks(b) - cpuTicks(a))[0]!;

/**
 * Looking processes up blocks this process (pgrep, /proc), and with it the load generator: a worker
 * left without requests for those milliseconds sees its journal acknowledged whole before the kill.
 * So the victims are chosen first, and killed a second later, under load.
 */
async function killUnderLoad(pids: number[] | number): Promise<void> {
  await sleep(1_000);
  for (const pid of [pids].flat()) process.kill(pid, 'SIGKILL');
}

describe('the journal under faults, on the local broker, 2 workers', () => {
  it('kill -9 of a worker under load: its replacement produces its journal again, nothing lost', { timeout: 180_000 }, async () => {
    const topic = await createTopic(uniqueTopic('journal-kill-worker'));
    const svc = await startService({ MQ_TOPIC: topic, WORKERS: '2' });
    const load = new AccountedLoad(svc.url, { connections: 8, pointsPerRequest: 10 });
    try {
      load.start();
      await sleep(7_000);
      const victim = busiest(svc);
      await killUnderLoad(victim);
      await until('a replacement worker', async () => workerPids(svc).length === 2 && !workerPids(svc).includes(victim), 10_000);
      await sleep(8_000);
    } finally {
      await load.stop();
    }
    await untilJournalEmpty(svc, 'the journal to be produced whole', 30_000);
    const a = await readBack(topic, load);
    report('kill -9 of the worker serving most connections, at 8 s of 16', a, await journalCounts(svc));
    expectNothingLost(a, 10_000);
    expect(await svc.stop()).toBe(0);
  });

  it('kill -9 of a worker while the broker is frozen and its queue is full: nothing lost once the broker is back', { timeout: 180_000 }, async () => {
    const topic = await createTopic(uniqueTopic('journal-kill-frozen'));
    // A small queue, so that the frozen broker fills it within the grace period.
    const svc = await startService({ MQ_TOPIC: topic, WORKERS: '2', PRODUCER_QUEUE_MAX_POINTS: '20000', QUEUE_FULL_WAIT_MS: '0' });
    const load = new AccountedLoad(svc.url, { connections: 8, pointsPerRequest: 10, pauseMs: 0 });
    let queuedAtKill: number;
    try {
      load.start();
      await sleep(3_000);
      freeze();
      await until(
        'a worker refusing with its queue full',
        async () => ((await metric(svc.url, 'ingest_requests_rejected_total{reason="queue_full"}')) ?? 0) > 0,
        10_000,
      );
      queuedAtKill = (await metric(svc.url, 'ingest_journal_records')) ?? 0;
      const victim = busiest(svc);
      await killUnderLoad(victim);
      await until('a replacement worker', async () => workerPids(svc).length === 2 && !workerPids(svc).includes(victim), 10_000);
      await sleep(2_000);
      thaw();
      await sleep(8_000);
    } finally {
      if (frozen) thaw();
      await load.stop();
    }
    await untilJournalEmpty(svc, 'the journal to be produced whole');
    const a = await readBack(topic, load);
    report(
      'broker frozen at 3 s, queue full, then the busiest worker killed; broker thawed 2 s later',
      a,
      `records in the journals at the kill: ${queuedAtKill}; ${await journalCounts(svc)}`,
    );
    expectNothingLost(a, 5_000);
    expect(await svc.stop()).toBe(0);
  });

  it(
    'SIGTERM during an outage longer than SHUTDOWN_TIMEOUT_MS, then the broker back and the service started again: nothing lost',
    { timeout: 180_000 },
    async () => {
      const topic = await createTopic(uniqueTopic('journal-sigterm-outage'));
      const dir = journalDir();
      const env = { MQ_TOPIC: topic, WORKERS: '2', JOURNAL_DIR: dir, SHUTDOWN_TIMEOUT_MS: '3000', BROKER_DOWN_GRACE_MS: '60000' };
      const first = await startService(env);
      const load = new AccountedLoad(first.url, { connections: 1, pointsPerRequest: 100, pauseMs: 0 });
      let code: number | null;
      try {
        freeze();
        load.start();
        await sleep(3_000);
        code = await first.stop('SIGTERM');
      } finally {
        await load.stop();
        thaw();
      }
      const heldAfterStop = walFiles(dir).length;
      const second = await startService(env);
      try {
        await until('the journal to be produced whole', async () => walFiles(dir).length === 0, 60_000);
        const a = await readBack(topic, load);
        report(
          `broker frozen, 3 s of requests on one connection, SIGTERM (SHUTDOWN_TIMEOUT_MS=3000, exit ${code}), broker thawed, service started again`,
          a,
          `journal files left at the stop: ${heldAfterStop}; ${await journalCounts(second)}`,
        );
        // A status other than 0 comes with the stop's warnings and errors, to say which step failed.
        expect(
          code,
          first.output
            .filter((l) => /"level":[456]0/.test(l))
            .slice(-20)
            .join('\n'),
        ).toBe(0);
        expect(first.output.some((l) => l.includes('they stay in the journal and are produced again at the next start'))).toBe(true);
        expectNothingLost(a, 1_000);
      } finally {
        expect(await second.stop()).toBe(0);
      }
    },
  );

  it('kill -9 of the whole service (primary and workers) under load, then started again: nothing lost', { timeout: 180_000 }, async () => {
    const topic = await createTopic(uniqueTopic('journal-kill-service'));
    const dir = journalDir();
    const env = { MQ_TOPIC: topic, WORKERS: '2', JOURNAL_DIR: dir };
    const first = await startService(env, { ownProcessGroup: true });
    const load = new AccountedLoad(first.url, { connections: 8, pointsPerRequest: 10 });
    let killed: number;
    try {
      load.start();
      await sleep(7_000);
      killed = servicePids(first).length;
      // Every process at once (its process group), as a crashed pod: no worker outlives the primary
      // to drain in order, and no replacement is forked.
      await killUnderLoad(-first.proc.pid!);
      await first.exited;
    } finally {
      await load.stop();
    }
    const heldAfterKill = walFiles(dir).length;
    const second = await startService(env);
    try {
      await untilJournalEmpty(second, 'the journal to be produced whole');
      const a = await readBack(topic, load);
      report(
        'kill -9 of the whole service (its process group) at 8 s of load, service started again',
        a,
        `${killed} processes killed; journal files left: ${heldAfterKill}; ${await journalCounts(second)}`,
      );
      expectNothingLost(a, 10_000);
    } finally {
      expect(await second.stop()).toBe(0);
    }
  });
});
