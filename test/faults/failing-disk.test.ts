// A disk that fails a sync takes the worker out of service, and nothing answered 202 is lost
// (journal/group-commit.ts, docs/reliability.md "A disk that fails"). The real service in
// JOURNAL_SYNC=disk mode under load, with the fdatasync of its worker's journal failing once with EIO
// through the file interface (test/fixtures/failing-fdatasync.mjs, preloaded): the journal fails,
// POST /track answers 500 journal_failed and readiness falls, the worker is restarted on what the disk
// holds, readiness comes back, and every point answered 202 is in Kafka.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ACCOUNTING_HEADER, AccountedLoad, accountingRow } from '../helpers/accounting.js';
import { consumeAll, createTopic, uniqueTopic } from '../../support/kafka.js';
import { metric, startService, until } from '../helpers/service.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/failing-fdatasync.mjs', import.meta.url));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Which worker answers /readyz on a fresh connection, and how: its status, or the error of a refused connection. */
async function readiness(url: string): Promise<{ status: number | string; pid?: number }> {
  try {
    const ready = await fetch(`${url}/readyz`, { headers: { connection: 'close' } });
    const health = ready.status === 200 ? ((await (await fetch(`${url}/healthz`, { headers: { connection: 'close' } })).json()) as { pid: number }) : null;
    return { status: ready.status, ...(health === null ? {} : { pid: health.pid }) };
  } catch (err) {
    return { status: ((err as Error).cause as NodeJS.ErrnoException | undefined)?.code ?? 'error' };
  }
}

describe('a disk that fails an fdatasync under load, JOURNAL_SYNC=disk', () => {
  it(
    'fails the journal: 500 journal_failed, readiness falls, the worker is restarted and recovers; every point answered 202 is in Kafka',
    { timeout: 180_000 },
    async () => {
      const topic = await createTopic(uniqueTopic('failing-disk'));
      const marker = join(mkdtempSync(join(tmpdir(), 'failing-disk-')), 'failed');
      const svc = await startService(
        { MQ_TOPIC: topic, WORKERS: '1', JOURNAL_SYNC: 'disk', FAIL_FDATASYNC_AFTER_MS: '4000', FAIL_FDATASYNC_MARKER: marker },
        { nodeArgs: ['--import', FIXTURE] },
      );
      const load = new AccountedLoad(svc.url, { connections: 8, pointsPerRequest: 10, pauseMs: 2 });
      const seen: { at: number; status: number | string; pid?: number }[] = [];
      let probing = true;
      const probe = (async () => {
        while (probing) {
          seen.push({ at: Date.now(), ...(await readiness(svc.url)) });
          await sleep(20);
        }
      })();
      try {
        const first = (await readiness(svc.url)).pid;
        load.start();
        await until('the journal to fail', async () => svc.output.some((l) => l.includes('the journal failed')), 30_000);
        await until('a new worker ready', async () => seen.some((s) => s.status === 200 && s.pid !== first), 30_000);
        await sleep(2_000);
        await load.stop();
        probing = false;
        await probe;
        const failedAt = seen.findIndex((s) => s.status !== 200);
        const down = seen.filter((s) => s.status !== 200);
        console.log(
          `readiness: ${down.length} of ${seen.length} probes not 200 (${[...new Set(down.map((s) => s.status))].join(', ')}), worker ${first} replaced by ${seen[seen.length - 1]!.pid}; answers 202×${load.statusCount(202)}, 500×${load.statusCount(500)}`,
        );
        expect(failedAt).toBeGreaterThan(0);
        expect(seen.slice(failedAt).some((s) => s.status === 200 && s.pid !== first)).toBe(true);
        expect(svc.output.filter((l) => l.includes('the journal failed')).join('\n')).toMatch(/EIO/);
        expect(await metric(svc.url, 'ingest_worker_restarts_total')).toBeGreaterThanOrEqual(1);
        const a = load.account(await consumeAll(topic, { expected: load.accepted, timeoutMs: 60_000, idleMs: 3_000 }));
        console.log(`${ACCOUNTING_HEADER}\n${accountingRow('fdatasync failed with EIO under load (JOURNAL_SYNC=disk); worker restarted', a)}`);
        expect(a.accepted).toBeGreaterThan(500);
        expect([a.lost, a.hangs]).toEqual([0, 0]);
        // The requests of the failed sync, and any the worker refused meanwhile, were answered 500 journal_failed.
        expect(load.statusCount(500)).toBeGreaterThan(0);
      } finally {
        probing = false;
        await load.stop().catch(() => undefined);
        expect(await svc.stop()).toBe(0);
      }
    },
  );
});
