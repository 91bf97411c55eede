// One process per journal slot, enforced (journal/slot-lock.ts), with real services on one JOURNAL_DIR:
// a second service stops at once, naming the directory and the process that holds it, and changes
// nothing of the first's files, which loses nothing and keeps serving; and a worker of an earlier
// service that outlives its primary keeps its slot until it exits, while the next service's worker of
// that slot waits for it, then produces what it left.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { ACCOUNTING_HEADER, AccountedLoad, accountingRow } from '../helpers/accounting.js';
import { workerPids } from '../helpers/processes.js';
import { consumeAll, createTopic, uniqueTopic } from '../../support/kafka.js';
import { journalDir, metric, startService, until, untilJournalEmpty, type Service } from '../helpers/service.js';

const KAFKA_SH = fileURLToPath(new URL('../../scripts/kafka.sh', import.meta.url));
const kafka = (...args: string[]) =>
  execFileSync(KAFKA_SH, args, { stdio: ['ignore', 'pipe', 'inherit'] })
    .toString()
    .trim();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
let frozen = false;
afterAll(() => {
  if (frozen) kafka('thaw-node', 'single');
});

/** Every file of the directory with its size and modification time: what a second service must leave as it is. */
const snapshot = (dir: string) =>
  readdirSync(dir)
    .sort()
    .map((name) => {
      const st = statSync(join(dir, name));
      return `${name} ${st.size} ${st.mtimeMs}`;
    });

describe('one service per JOURNAL_DIR, one process per slot', () => {
  it(
    'a second service on a directory in use stops at once (exit 6), naming the directory and the process holding it, and changes nothing; the first loses nothing and keeps serving',
    { timeout: 180_000 },
    async () => {
      const topic = await createTopic(uniqueTopic('journal-second-service'));
      const dir = journalDir();
      const first = await startService({ MQ_TOPIC: topic, JOURNAL_DIR: dir, WORKERS: '2' });
      const load = new AccountedLoad(first.url, { connections: 4, pointsPerRequest: 10, pauseMs: 2 });
      try {
        load.start();
        await sleep(3_000);
        // The load paused, so that the first service's own writes do not change the directory meanwhile.
        await load.stop();
        await untilJournalEmpty(first, "the first service's journal acknowledged");
        const before = snapshot(dir);
        const started = Date.now();
        const second = await startService({ MQ_TOPIC: topic, JOURNAL_DIR: dir, WORKERS: '2' }, { waitFor: 'nothing' });
        const code = await second.exited;
        const took = Date.now() - started;
        const said = second.output.join('\n');
        console.log(`second service on ${dir}: exit ${code} after ${took} ms: ${said.split('\n').find((l) => l.startsWith('cannot start'))}`);
        expect(code).toBe(6);
        expect(took).toBeLessThan(5_000);
        expect(said).toMatch(
          new RegExp(
            `cannot start: the journal directory ${dir} \\(JOURNAL_DIR\\) is in use by another service; give each instance a directory of its own: process ${first.proc.pid} \\(track-ingest primary\\) holds ${dir}/service.lock`,
          ),
        );
        expect(snapshot(dir)).toEqual(before);
        // The first serves on, and every point it answered 202 reaches Kafka.
        const more = new AccountedLoad(first.url, { connections: 4, pointsPerRequest: 10, pauseMs: 2 });
        more.start();
        await sleep(2_000);
        await more.stop();
        for (const l of [load, more]) {
          const a = l.account(await consumeAll(topic, { expected: l.accepted, timeoutMs: 60_000, idleMs: 2_000 }));
          console.log(`${ACCOUNTING_HEADER}\n${accountingRow('the first service, before and after a second one tried its directory', a)}`);
          expect(a.accepted).toBeGreaterThan(100);
          expect([a.lost, a.hangs, a.rejected]).toEqual([0, 0, 0]);
        }
      } finally {
        expect(await first.stop()).toBe(0);
      }
    },
  );

  it(
    "a worker that outlives its primary keeps its slot; the next service's worker of that slot waits for it, then produces what it left: nothing lost",
    { timeout: 180_000 },
    async () => {
      const topic = await createTopic(uniqueTopic('journal-orphan-slot'));
      const dir = journalDir();
      const env = { MQ_TOPIC: topic, JOURNAL_DIR: dir, WORKERS: '1', STANDBY_WORKER: '0', BROKER_DOWN_GRACE_MS: '60000' };
      const first = await startService(env);
      const load = new AccountedLoad(first.url, { connections: 2, pointsPerRequest: 10, pauseMs: 5 });
      let second: Service | undefined;
      let orphan = 0;
      try {
        load.start();
        await sleep(2_000);
        // The broker frozen, so that the worker's records stay in its journal unacknowledged.
        kafka('freeze-node', 'single');
        frozen = true;
        await sleep(500);
        [orphan] = workerPids(first) as [number];
        // The worker stopped (as a worker stuck in a long pause is), then its primary killed alone: Node's
        // cluster would end the worker as soon as it saw its channel close, but a stopped worker sees nothing.
        process.kill(orphan, 'SIGSTOP');
        first.proc.kill('SIGKILL');
        const stopped = load.stop();
        second = await startService(env, { waitFor: 'nothing' });
        const next = second;
        await until(
          "the next service's worker to wait for the slot",
          async () => next.output.some((l) => l.includes('this journal slot is held by another process')),
          20_000,
        );
        const waiting = JSON.parse(next.output.find((l) => l.includes('this journal slot is held by another process'))!) as { holder: string };
        expect(waiting.holder).toBe(`process ${orphan} (track-ingest worker 0)`);
        await sleep(1_000);
        expect(next.output.some((l) => l.includes('"msg":"worker started"'))).toBe(false); // it touched nothing meanwhile
        // The worker goes on, sees its primary gone, and exits: its lock goes with it.
        process.kill(orphan, 'SIGCONT');
        await until('the orphan to exit', async () => !existsSync(`/proc/${orphan}`), 10_000);
        kafka('thaw-node', 'single');
        frozen = false;
        await stopped;
        await until('the next service ready', async () => (await fetch(`${next.url}/readyz`)).status === 200, 30_000);
        await untilJournalEmpty(next, 'the journal produced whole');
        const a = load.account(await consumeAll(topic, { expected: load.accepted, timeoutMs: 60_000, idleMs: 3_000 }));
        console.log(
          `${ACCOUNTING_HEADER}\n${accountingRow('a worker stopped, its primary killed, the broker frozen; the next service waited for the slot until the worker exited', a)}`,
        );
        expect(a.accepted).toBeGreaterThan(50);
        expect([a.lost, a.hangs]).toEqual([0, 0]);
        expect(await metric(next.url, 'ingest_journal_replayed_points_total{cause="restart"}')).toBeGreaterThan(0);
      } finally {
        if (orphan !== 0 && existsSync(`/proc/${orphan}`)) process.kill(orphan, 'SIGKILL');
        if (frozen) kafka('thaw-node', 'single');
        frozen = false;
        if (second !== undefined) expect(await second.stop()).toBe(0);
      }
    },
  );
});
