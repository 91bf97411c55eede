// What the service relies on from uWebSockets.js, held against whichever build this runtime loads
// (src/http/uws.ts: v20.30 on Node 20 with an older glibc, v20.57 elsewhere). The suite runs on both:
// on the host (Node 20, Debian 12) and in the Debian 13 root on Node 24 (make test-node24).
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { idleCloseS, uwsBuild } from '../../src/http/uws.js';
import { parseAnswer, raw } from '../helpers/raw-http.js';
import { point, postTrack, startService, type Service } from '../helpers/service.js';
import { fileTopic } from '../helpers/topic.js';

const topic = fileTopic('uws');
let svc: Service;
let workerPid: number;
const build = uwsBuild().version;
const HTTP_IDLE_CLOSE_S = idleCloseS(uwsBuild().idleTimeoutS);

beforeAll(async () => {
  // JOURNAL_SYNC=disk: every 202 is written after an fdatasync, outside uWS's own callback (corked).
  svc = await startService({ MQ_TOPIC: topic, WORKERS: '1', JOURNAL_SYNC: 'disk' });
  workerPid = ((await (await fetch(`${svc.url}/healthz`)).json()) as { pid: number }).pid;
});
afterAll(async () => {
  expect(await svc.stop()).toBe(0);
});

const body = JSON.stringify([point('UWS')]);
const request = (extra = '') => `POST /track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n${extra}\r\n${body}`;

/** The same worker still answers, and no warning about uncorked writes was printed. */
async function stillServing(): Promise<void> {
  expect((await postTrack(svc.url, [point('UWS-AFTER')])).status).toBe(202);
  expect(((await (await fetch(`${svc.url}/healthz`)).json()) as { pid: number }).pid).toBe(workerPid);
  expect(svc.output.join('\n')).not.toMatch(/corked|Falling back/);
}

describe(`uWebSockets.js v${build}: what the service relies on`, () => {
  it(
    'HTTP/1.0: answered 505 and closed (v20.57), or closed unanswered by the idle timeout (v20.30); never left open, and the worker serves on',
    { timeout: 60_000 },
    async () => {
      const t0 = performance.now();
      const { text, closed } = await raw(svc.port, (s) => s.write(request().replace('HTTP/1.1', 'HTTP/1.0')), (HTTP_IDLE_CLOSE_S.latest + 2) * 1000);
      const seconds = (performance.now() - t0) / 1000;
      expect(closed).toBe(true);
      if (build === '20.30.0') expect([text, seconds <= HTTP_IDLE_CLOSE_S.latest + 1]).toEqual(['', true]);
      else expect([parseAnswer(text).status, seconds < 2]).toEqual([505, true]);
      await stillServing();
    },
  );

  it(
    `closes a connection idle since its last byte (this build: ${uwsBuild().idleTimeoutS} s, so between ${HTTP_IDLE_CLOSE_S.earliest} and ${HTTP_IDLE_CLOSE_S.latest} s)`,
    { timeout: 60_000 },
    async () => {
      const t0 = performance.now();
      const s = connect(svc.port, '127.0.0.1');
      await new Promise<void>((resolve) => s.once('close', () => resolve()));
      const seconds = (performance.now() - t0) / 1000;
      expect(seconds).toBeGreaterThanOrEqual(HTTP_IDLE_CLOSE_S.earliest - 0.5);
      expect(seconds).toBeLessThanOrEqual(HTTP_IDLE_CLOSE_S.latest + 1);
    },
  );

  it('refuses a header block over MAX_HEADER_BYTES with 431 (v20.57), closes one that outgrows its buffer (both builds), and serves on', async () => {
    const header = (bytes: number) => `X-Big: ${'a'.repeat(bytes)}\r\n`;
    // 4 KiB of header block (MAX_HEADER_BYTES' default): taken by both builds.
    expect(parseAnswer((await raw(svc.port, (s) => s.write(request(header(3_900 - request().length))))).text).status).toBe(202);
    const over = await raw(svc.port, (s) => s.write(request(header(8 * 1024))), 1_000);
    // v20.30 has no such limit (README, MAX_HEADER_BYTES): it takes 8 KiB.
    expect(parseAnswer(over.text).status).toBe(build === '20.30.0' ? 202 : 431);
    const huge = await raw(svc.port, (s) => s.write(request(header(1024 * 1024))), 1_000);
    expect([huge.closed, huge.text === '' || parseAnswer(huge.text).status === 431]).toEqual([true, true]);
    await stillServing();
  });

  it.runIf(build === '20.57.0')('takes a larger header block with MAX_HEADER_BYTES raised (the workers get it as UWS_HTTP_MAX_HEADERS_SIZE)', async () => {
    const big = await startService({ MQ_TOPIC: topic, WORKERS: '1', MAX_HEADER_BYTES: '16384' });
    try {
      const at = (bytes: number) => raw(big.port, (s) => s.write(request(`X-Big: ${'a'.repeat(bytes)}\r\n`)), 1_000);
      expect(parseAnswer((await at(12 * 1024)).text).status).toBe(202);
      expect(parseAnswer((await at(20 * 1024)).text).status).toBe(431);
    } finally {
      await big.stop();
    }
  });

  it('answers Expect: 100-continue with 100 before the body, then 202', async () => {
    const s = connect(svc.port, '127.0.0.1');
    const got: string[] = [];
    s.on('data', (d) => got.push(d.toString()));
    await new Promise((r) => s.once('connect', r));
    s.write(request('Expect: 100-continue\r\n').slice(0, -body.length));
    await until(() => got.join('').includes('\r\n\r\n'));
    expect(got.join('')).toMatch(/^HTTP\/1\.1 100 Continue\r\n/);
    s.write(body);
    await until(() => /HTTP\/1\.1 202 /.test(got.join('')));
    s.destroy();
  });

  it('writes an answer made outside its callback (after the fdatasync) corked: status, headers and body in one write', async () => {
    const s = connect(svc.port, '127.0.0.1');
    await new Promise((r) => s.once('connect', r));
    const chunks: string[] = [];
    s.on('data', (d) => chunks.push(d.toString()));
    for (let i = 0; i < 5; i++) {
      const before = chunks.length;
      s.write(request());
      await until(() => chunks.slice(before).join('').endsWith('{"accepted":1}'));
      // One request in flight at a time: an answer written in pieces would arrive as several reads.
      expect(chunks.length - before, `answer ${i} came in ${chunks.length - before} pieces`).toBe(1);
      expect(parseAnswer(chunks[before]!).status).toBe(202);
    }
    s.destroy();
    await stillServing();
  });

  it('survives clients gone mid-body and gone before their answer: nothing written to a dead connection, the worker serves on', async () => {
    const sockets: Socket[] = [];
    for (let i = 0; i < 200; i++) {
      const s = connect(svc.port, '127.0.0.1');
      s.on('error', () => undefined);
      sockets.push(s);
      // Half of them stop halfway through the body; the others send it all and hang up at once,
      // while their answer waits for the fdatasync.
      s.once('connect', () => {
        const r = request();
        s.write(i % 2 === 0 ? r.slice(0, r.length - 10) : r);
        if (i % 2 === 1) s.destroy();
      });
    }
    await new Promise((r) => setTimeout(r, 300));
    for (const s of sockets) s.destroy();
    await stillServing();
  });
});

async function until(done: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 5));
  }
}
