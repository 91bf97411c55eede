// `drain` (issue 61): a journal its service left behind, produced without that service. A service of
// 2 workers killed with kill -9 under load while the broker is frozen leaves points answered 202 in
// its journal; `drain` run on the directory produces them, at least once (none lost, duplicates
// counted) and exactly once (each once for a read_committed reader, under the transactional ids of the
// instance that wrote it, though drain runs under another name, as a Kubernetes Job does). A service
// asked to stop waits for its journal to empty. A drain
// that cannot reach Kafka gives up within DRAIN_TIMEOUT_MS and keeps the files; one on a directory in
// use changes nothing; flipped bytes cost their records alone.
import { execFileSync, spawn } from 'node:child_process';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { diskFiles } from '../../src/journal/files.js';
import { Journal } from '../../src/journal/journal.js';
import { claimSlotsNow } from '../../src/journal/slot-lock.js';
import { EXIT } from '../../src/process/exit-codes.js';
import { encodePoints } from '../../src/track-point/encode.js';
import { collectLines } from '../../support/lines.js';
import { BROKERS, consumeAll, createTopic, uniqueTopic } from '../../support/kafka.js';
import { ACCOUNTING_HEADER, AccountedLoad, accountingRow, expectEveryAcceptedPointOnce } from '../helpers/accounting.js';
import { eosTopics, exactlyOnceEnv, readBoth, reportBoth } from '../helpers/exactly-once.js';
import { journalDir, startService } from '../helpers/service.js';

const MAIN = fileURLToPath(new URL('../../dist/src/main.js', import.meta.url));
const KAFKA_SH = fileURLToPath(new URL('../../scripts/kafka.sh', import.meta.url));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let frozen = false;
function freeze(): void {
  execFileSync(KAFKA_SH, ['freeze-node', 'single'], { stdio: 'ignore' });
  frozen = true;
}
function thaw(): void {
  execFileSync(KAFKA_SH, ['thaw-node', 'single'], { stdio: 'ignore' });
  frozen = false;
}
afterAll(() => {
  if (frozen) thaw();
});

interface Drained {
  code: number | null;
  /** Its standard output: the summary line. */
  summary: string;
  /** Its standard error: progress lines and logs. */
  errors: string[];
  ms: number;
}

/** `node dist/src/main.js drain` on `dir`, as `make drain` and the image run it. */
function drain(dir: string, env: Record<string, string>): Promise<Drained> {
  const started = Date.now();
  const proc = spawn(process.execPath, [MAIN, 'drain'], {
    env: { ...process.env, MQ_BROKERS: BROKERS, LOG_LEVEL: 'warn', ...env, JOURNAL_DIR: dir },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const out: string[] = [];
  const errors: string[] = [];
  collectLines(proc.stdout, out);
  collectLines(proc.stderr, errors);
  return new Promise((resolve) => proc.once('close', (code) => resolve({ code, summary: out.join('\n'), errors, ms: Date.now() - started })));
}

/** The journal's files and their sizes, locks aside (a lock's line names whoever took it last). */
function journalFiles(dir: string): string[] {
  return readdirSync(dir)
    .filter((n) => !n.endsWith('.lock'))
    .sort()
    .map((n) => `${n} ${statSync(join(dir, n)).size}`);
}

const produced = (d: Drained) => Number(/(\d+) points produced/.exec(d.summary)?.[1] ?? -1);

/**
 * A service of 2 workers under load on `dir`; the broker frozen 2 s in, and 2 s later the whole
 * service killed with kill -9 (primary and workers, as a node that dies): what Kafka had not
 * acknowledged is in the journal. The broker stays frozen.
 */
async function strand(dir: string, env: Record<string, string>): Promise<AccountedLoad> {
  const svc = await startService({ WORKERS: '2', JOURNAL_DIR: dir, ...env }, { ownProcessGroup: true });
  const load = new AccountedLoad(svc.url, { connections: 8, pointsPerRequest: 10 });
  try {
    load.start();
    await sleep(2_000);
    freeze();
    await sleep(2_000);
    process.kill(-svc.proc.pid!, 'SIGKILL');
    await svc.exited;
  } finally {
    await load.stop();
  }
  return load;
}

describe('drain: a journal left behind, produced without its service', () => {
  it(
    'at least once: a service killed under load with the broker frozen; drain gives up within DRAIN_TIMEOUT_MS keeping the files, and once the broker is back produces every 202',
    { timeout: 180_000 },
    async () => {
      const topic = await createTopic(uniqueTopic('drain-alo'));
      const dir = journalDir();
      let unreachable: Drained;
      let left: string[];
      try {
        const load = await strand(dir, { MQ_TOPIC: topic });
        left = journalFiles(dir);
        expect(
          left.some((f) => /\.wal [1-9]/.test(f)),
          left.join('\n'),
        ).toBe(true);
        unreachable = await drain(dir, { MQ_TOPIC: topic, DRAIN_TIMEOUT_MS: '3000' });
        expect(unreachable.code, unreachable.summary).toBe(EXIT.UNFLUSHED);
        expect(unreachable.summary).toMatch(/acknowledged nothing for 3000 ms \(DRAIN_TIMEOUT_MS\); the files are kept/);
        // Given up at 3 s, exited within the 2 s of a connection attempt under way, and a margin for a busy machine.
        expect(unreachable.ms).toBeLessThan(9_000);
        expect(
          unreachable.errors.some((l) => /^drain: \d+ points in \d+ records left; 0 points\/s$/.test(l)),
          unreachable.errors.join('\n'),
        ).toBe(true);
        expect(journalFiles(dir)).toEqual(left);
        thaw();

        const drained = await drain(dir, { MQ_TOPIC: topic });
        expect(drained.code, `${drained.summary}\n${drained.errors.join('\n')}`).toBe(EXIT.OK);
        expect(drained.summary).toMatch(/nothing left: JOURNAL_DIR=.* holds nothing Kafka has not acknowledged/);
        expect(produced(drained)).toBeGreaterThan(0);
        expect(journalFiles(dir).filter((f) => f.includes('.wal'))).toEqual([]);
        const a = load.account(await consumeAll(topic, { expected: load.accepted, timeoutMs: 90_000, toEnd: true }));
        console.log(`${ACCOUNTING_HEADER}\n${accountingRow('kill -9 of the service (2 workers) with the broker frozen, then drain', a)}\n(${drained.summary})`);
        expect(a.accepted).toBeGreaterThan(1_000);
        expect(a.lost).toBe(0);
      } finally {
        if (frozen) thaw();
      }
    },
  );

  it(
    'a service asked to stop (SIGTERM: a pod removed) waits for its journal to empty while Kafka comes back, and leaves none',
    { timeout: 120_000 },
    async () => {
      const topic = await createTopic(uniqueTopic('drain-sigterm'));
      const dir = journalDir();
      try {
        const load = await strand(dir, { MQ_TOPIC: topic });
        // Started on what the killed service left, the broker still frozen: nothing produced yet.
        const svc = await startService({ MQ_TOPIC: topic, WORKERS: '2', JOURNAL_DIR: dir, SHUTDOWN_TIMEOUT_MS: '30000' }, { waitFor: 'nothing' });
        await sleep(2_000);
        svc.proc.kill('SIGTERM');
        await sleep(2_000);
        thaw();
        expect(await svc.exited).toBe(0);
        expect(journalFiles(dir).filter((f) => /\.wal [1-9]/.test(f) || f.includes('.done'))).toEqual([]);
        const a = load.account(await consumeAll(topic, { expected: load.accepted, timeoutMs: 90_000, toEnd: true }));
        console.log(
          `${ACCOUNTING_HEADER}\n${accountingRow('kill -9 with the broker frozen; the next service started and stopped (SIGTERM) while frozen, thawed 2 s into its shutdown', a)}`,
        );
        expect(a.accepted).toBeGreaterThan(1_000);
        expect(a.lost).toBe(0);
      } finally {
        if (frozen) thaw();
      }
    },
  );

  it('exactly once: the same journal drained under another INSTANCE_ID, each 202 found once by a read_committed reader', { timeout: 180_000 }, async () => {
    const topics = await eosTopics('drain-eos');
    const dir = journalDir();
    try {
      const load = await strand(dir, exactlyOnceEnv(topics));
      expect(journalFiles(dir).some((f) => /\.wal [1-9]/.test(f))).toBe(true);
      thaw();
      // A Job's pod is named otherwise: the ids and positions are those the directory recorded.
      const drained = await drain(dir, exactlyOnceEnv(topics, { INSTANCE_ID: 'drain-job-elsewhere', LOG_LEVEL: 'info' }));
      expect(drained.code, `${drained.summary}\n${drained.errors.join('\n')}`).toBe(EXIT.OK);
      const instance = exactlyOnceEnv(topics).INSTANCE_ID!;
      expect(drained.errors.some((l) => l.includes(`"instance":"${instance}"`) && l.includes('the instance that wrote this journal'))).toBe(true);
      expect(drained.summary).toMatch(/\d+ already committed before \(not produced again\)/);
      const r = await readBoth(topics.MQ_TOPIC, load);
      reportBoth('DELIVERY=exactly-once: kill -9 of the service with the broker frozen, then drain under another INSTANCE_ID', r, drained.summary);
      expectEveryAcceptedPointOnce(r.committed, 1_000);
      expect(r.committed.deliveredAfterError).toBe(0);
    } finally {
      if (frozen) thaw();
    }
  });

  it("on a directory whose service runs: exits with the lock's code naming the holder, and changes nothing", { timeout: 60_000 }, async () => {
    const topic = await createTopic(uniqueTopic('drain-in-use'));
    const dir = journalDir();
    const svc = await startService({ MQ_TOPIC: topic, WORKERS: '2', JOURNAL_DIR: dir });
    try {
      const before = journalFiles(dir);
      const drained = await drain(dir, { MQ_TOPIC: topic });
      expect(drained.code).toBe(EXIT.JOURNAL_IN_USE);
      expect(drained.summary).toMatch(new RegExp(`process ${svc.proc.pid} \\(track-ingest primary\\) holds ${dir}/service\\.lock.*nothing was touched`));
      expect(journalFiles(dir)).toEqual(before);
      expect((await fetch(`${svc.url}/readyz`)).status).toBe(200);
    } finally {
      expect(await svc.stop()).toBe(0);
    }
  });

  it('on a journal with flipped bytes: counts the damaged records, produces every other one, exits 8', { timeout: 60_000 }, async () => {
    const topic = await createTopic(uniqueTopic('drain-damaged'));
    const dir = journalDir();
    // 40 records of 10 points, each record one container's, all of one size, written as a worker of
    // slot 1 writes them; then bytes flipped in the middle of records 5 and 30.
    const records = 40;
    const run = `dmg${Date.now().toString(36)}`;
    const claim = claimSlotsNow({ files: diskFiles, dir, slot: 1, slotsInUse: 2 });
    const journal = new Journal({ dir, claim, maxBytes: 2 ** 30, sync: 'process', mapSegments: false });
    for (let r = 0; r < records; r++) {
      const points = Array.from({ length: 10 }, (_, i) => ({
        container_id: `${run}-r${String(r).padStart(2, '0')}`,
        lat: 51.9,
        lon: 4.4,
        timestamp: `2026-12-03T10:00:${String(i).padStart(2, '0')}Z`,
        speed: 0,
      }));
      const e = encodePoints(points);
      journal.append({ count: e.count, data: Buffer.from(e.data), messages: e.messages.slice() }, Date.now());
    }
    journal.close();
    claim.release();
    const wal = readdirSync(dir).find((n) => n.endsWith('.wal'))!;
    const bytes = readFileSync(join(dir, wal));
    const size = bytes.byteLength / records;
    for (const r of [5, 30]) bytes[r * size + Math.floor(size / 2)]! ^= 0xff;
    writeFileSync(join(dir, wal), bytes);

    const drained = await drain(dir, { MQ_TOPIC: topic });
    expect(drained.code, `${drained.summary}\n${drained.errors.join('\n')}`).toBe(EXIT.JOURNAL_DAMAGED);
    expect(drained.summary).toMatch(/^drain: 380 points produced .*, 2 damaged records; nothing else left/);
    expect(drained.errors.filter((l) => /damaged record\(s\) in .*\.wal/.test(l))).toHaveLength(2);
    const found = await consumeAll(topic, { expected: 380, timeoutMs: 30_000, toEnd: true });
    const byKey = new Map<string, number>();
    for (const m of found) if (m.key.startsWith(run)) byKey.set(m.key, (byKey.get(m.key) ?? 0) + 1);
    const expected = Array.from({ length: records }, (_, r) => r).filter((r) => r !== 5 && r !== 30);
    expect([...byKey.keys()].sort()).toEqual(expected.map((r) => `${run}-r${String(r).padStart(2, '0')}`));
    for (const n of byKey.values()) expect(n).toBe(10);
  });
});
