// Issue 3, hostile input at the connection level: 1,000 clients sending a byte a second, and
// thousands of connections opened and dropped mid-request. The worker keeps serving everyone else,
// its memory stays bounded, and it is never replaced.
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idleCloseS, uwsBuild } from '../../src/http/uws.js';
import { metric, point, postTrack, startService, type Service } from '../helpers/service.js';
import { fileTopic } from '../helpers/topic.js';

const topic = fileTopic('hostile');
let svc: Service;
let workerPid: number;

beforeAll(async () => {
  svc = await startService({ MQ_TOPIC: topic, WORKERS: '1' });
  workerPid = ((await (await fetch(`${svc.url}/healthz`)).json()) as { pid: number }).pid;
});
afterAll(async () => {
  expect(await svc.stop()).toBe(0);
});

const rssMiB = () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${workerPid}/status`, 'utf8'))![1]) / 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const HEAD = 'POST /track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n';

/** Normal clients during the attack: every request must be answered 202, promptly. */
async function serveOthers(untilDone: () => boolean): Promise<{ statuses: number[]; slowestMs: number }> {
  const statuses: number[] = [];
  let slowestMs = 0;
  while (!untilDone()) {
    const t0 = performance.now();
    statuses.push((await postTrack(svc.url, [point('HOSTILE-OK')])).status);
    slowestMs = Math.max(slowestMs, performance.now() - t0);
    await sleep(100);
  }
  return { statuses, slowestMs };
}

describe('hostile connections', () => {
  it('1,000 connections sending a byte a second are cut off by the idle timeout while others are served', { timeout: 90_000 }, async () => {
    // The close comes with the build's idle timeout (src/http/uws.ts): v20.30 8 to 12 s, v20.57 28 to 32 s.
    const closeBy = idleCloseS(uwsBuild().idleTimeoutS).latest * 1000 + 8_000;
    const rssBefore = rssMiB();
    let peak = rssBefore;
    const sockets: Socket[] = [];
    const closedAfter: number[] = [];
    let answeredWith2xx = 0;
    const t0 = Date.now();
    for (let i = 0; i < 1000; i++) {
      const s = connect(svc.port, '127.0.0.1');
      s.on('error', () => undefined);
      s.on('data', (d) => {
        if (/^HTTP\/1\.1 2/.test(d.toString())) answeredWith2xx++;
      });
      s.on('close', () => closedAfter.push(Date.now() - t0));
      // Half trickle the headers, half send the headers and trickle the body.
      const text = i % 2 === 0 ? HEAD : HEAD + '['.repeat(200);
      let at = i % 2 === 0 ? 0 : HEAD.length;
      if (at > 0) s.write(text.slice(0, at));
      const drip = setInterval(() => {
        if (s.destroyed || at >= text.length) return clearInterval(drip);
        s.write(text[at++]!);
      }, 1000);
      s.on('close', () => clearInterval(drip));
      sockets.push(s);
    }
    const sampler = setInterval(() => (peak = Math.max(peak, rssMiB())), 250);
    const others = await serveOthers(() => closedAfter.length === 1000 || Date.now() - t0 > closeBy + 10_000);
    clearInterval(sampler);
    for (const s of sockets) s.destroy();
    console.log(
      `slow clients: 1000 connections, all closed by the server after ${Math.min(...closedAfter)}–${Math.max(...closedAfter)} ms; ` +
        `${others.statuses.length} normal requests meanwhile, slowest ${others.slowestMs.toFixed(0)} ms; worker RSS ${rssBefore.toFixed(0)} → peak ${peak.toFixed(0)} MiB`,
    );
    expect(closedAfter).toHaveLength(1000); // none kept open indefinitely
    expect(Math.max(...closedAfter)).toBeLessThan(closeBy);
    expect(answeredWith2xx).toBe(0);
    expect(others.statuses.length).toBeGreaterThan(20);
    expect(others.statuses.every((s) => s === 202)).toBe(true);
    expect(peak - rssBefore).toBeLessThan(100);
    expect(((await (await fetch(`${svc.url}/healthz`)).json()) as { pid: number }).pid).toBe(workerPid);
  });

  it('5,000 connections opened and dropped mid-request do not hurt the worker', { timeout: 60_000 }, async () => {
    const rssBefore = rssMiB();
    const body = JSON.stringify([point('HOSTILE-CHURN')]);
    const full = `POST /track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    let done = 0;
    let peak = rssBefore;
    const churn = async (n: number) => {
      for (let i = 0; i < n; i++) {
        await new Promise<void>((resolve) => {
          const s = connect(svc.port, '127.0.0.1', () => {
            // Cut anywhere: in the request line, the headers, the body, or right after it.
            s.write(full.slice(0, Math.floor(Math.random() * full.length)));
            setImmediate(() => {
              s.destroy();
              resolve();
            });
          });
          s.on('error', () => resolve());
        });
        done++;
      }
    };
    const sampler = setInterval(() => (peak = Math.max(peak, rssMiB())), 250);
    const others = serveOthers(() => done === 5000);
    await Promise.all(Array.from({ length: 50 }, () => churn(100)));
    const served = await others;
    clearInterval(sampler);
    console.log(
      `churn: 5000 connections dropped mid-request; ${served.statuses.length} normal requests meanwhile, slowest ${served.slowestMs.toFixed(0)} ms; worker RSS ${rssBefore.toFixed(0)} → peak ${peak.toFixed(0)} MiB`,
    );
    expect(served.statuses.every((s) => s === 202)).toBe(true);
    expect(peak - rssBefore).toBeLessThan(100);
    expect((await postTrack(svc.url, [point('HOSTILE-AFTER')])).status).toBe(202);
    expect(((await (await fetch(`${svc.url}/healthz`)).json()) as { pid: number }).pid).toBe(workerPid);
    expect(await metric(svc.url, 'ingest_worker_restarts_total')).toBe(0);
  });
});
