// The primary forks WORKERS workers that all serve one port, and replaces one that dies.
import { get } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { point, postFresh, startService, type Service } from '../helpers/service.js';
import { fileTopic } from '../helpers/topic.js';

let svc: Service;
const topic = fileTopic('cluster');

/** GET /healthz on a fresh connection each time (no keep-alive), so the kernel picks a worker anew. */
function healthPid(url: string): Promise<number> {
  return new Promise((resolve, reject) => {
    get(`${url}/healthz`, { agent: false }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve((JSON.parse(body) as { pid: number }).pid));
    }).on('error', reject);
  });
}
async function pidsSeen(url: string, connections = 60): Promise<Set<number>> {
  const pids = new Set<number>();
  for (let i = 0; i < connections; i++) pids.add(await healthPid(url));
  return pids;
}
async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 15_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

beforeAll(async () => {
  svc = await startService({ MQ_TOPIC: topic, WORKERS: '2' });
  await waitFor('both workers listening', async () => (svc.output.some((l) => l.includes('"service listening"')) ? true : undefined));
});
afterAll(async () => {
  expect(await svc?.stop()).toBe(0);
});

describe('WORKERS=2', () => {
  it('both workers serve connections on the one port', async () => {
    const pids = await pidsSeen(svc.url);
    expect(pids.size).toBe(2);
    expect(pids.has(svc.proc.pid!)).toBe(false); // the primary serves no HTTP
  });

  it('replaces a worker killed with SIGKILL, and keeps serving meanwhile', async () => {
    const before = await pidsSeen(svc.url);
    const [victim, survivor] = [...before];
    process.kill(victim!, 'SIGKILL');
    const killedAt = Date.now();
    // kill() only sends the signal. Connections the kernel hands the victim before it is gone are
    // reset with it (SO_REUSEPORT gives each worker its own accept queue), so wait for it to be gone.
    await waitFor('the victim to be gone', async () => {
      try {
        process.kill(victim!, 0);
        return undefined;
      } catch {
        return true;
      }
    });
    // The survivor answers at once; the replacement appears shortly after.
    expect((await postFresh(svc.url, [point('during-restart')])).status).toBe(202);
    const after = await waitFor('a replacement worker', async () => {
      const pids = await pidsSeen(svc.url, 20);
      return pids.size === 2 && !pids.has(victim!) ? pids : undefined;
    });
    const replacedInMs = Date.now() - killedAt;
    expect(after.has(survivor!)).toBe(true);
    expect(replacedInMs).toBeLessThan(10_000);
    expect(svc.output.some((l) => l.includes('worker exited unexpectedly; replacing it') && l.includes('"signal":"SIGKILL"'))).toBe(true);
    const metrics = await (await fetch(`${svc.url}/metrics`)).text();
    expect(metrics).toMatch(/^ingest_worker_restarts_total 1$/m);
    // And the replacement takes points too.
    await waitFor('replacement ready', async () => {
      for (let i = 0; i < 10; i++) if ((await fetch(`${svc.url}/readyz`)).status !== 200) return undefined;
      return true;
    });
    expect((await postFresh(svc.url, [point('after-restart')])).status).toBe(202);
  });
});
