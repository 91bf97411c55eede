// The two implementations under test, started as separate processes the way they run in production.
import { spawn, type ChildProcess, type ChildProcessByStdio } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';

export type Impl = 'ours' | 'baseline';

const ENTRY: Record<Impl, string> = {
  ours: fileURLToPath(new URL('../../src/main.js', import.meta.url)),
  baseline: fileURLToPath(new URL('../baseline/server.js', import.meta.url)),
};

export interface Target {
  impl: Impl;
  url: string;
  proc: ChildProcess;
  stop(): Promise<number | null>;
}

/**
 * entry: another build of the same implementation (e.g. an older commit's dist/src/main.js), to compare.
 * until: 'ready' (below), or 'listening' for a service meant to refuse (no broker): any answer.
 * node: the Node.js binary to run it on (another version, side by side).
 */
export async function startTarget(
  impl: Impl,
  port: number,
  env: Record<string, string>,
  entry = ENTRY[impl],
  until: 'ready' | 'listening' = 'ready',
  node = process.execPath,
): Promise<Target> {
  // Ours writes every accepted point to its journal: a fresh one each start, so that no run produces
  // an earlier run's points again (an older build, before the journal, ignores the variable).
  const journal = mkdtempSync(join(tmpdir(), 'bench-journal-'));
  const proc = spawn(node, [entry], {
    env: { ...process.env, LISTEN_ADDR: `127.0.0.1:${port}`, LOG_LEVEL: 'warn', JOURNAL_DIR: journal, ...env },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const exited = new Promise<number | null>((resolve) => proc.once('exit', resolve));
  const url = `http://127.0.0.1:${port}`;
  const target: Target = {
    impl,
    url,
    proc,
    async stop() {
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 60_000);
      const code = await exited;
      clearTimeout(timer);
      rmSync(journal, { recursive: true, force: true });
      return code;
    },
  };
  // Ready when an empty batch is accepted (both implementations answer 202 to []), and for ours
  // when /readyz says the producer holds the topic's metadata.
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (
      until === 'listening' &&
      (await fetch(`${url}/healthz`)
        .then((r) => r.ok)
        .catch(() => false))
    )
      return target;
    const ok = await fetch(`${url}/track`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '[]' })
      .then((r) => r.status === 202)
      .catch(() => false);
    const ready =
      impl === 'baseline' ||
      (await fetch(`${url}/readyz`)
        .then((r) => r.status === 200)
        .catch(() => false));
    if (ok && ready) return target;
    await new Promise((r) => setTimeout(r, 200));
  }
  proc.kill('SIGKILL');
  throw new Error(`${impl} did not become ready on ${url}`);
}

const BARE_HTTP = fileURLToPath(new URL('./bare-http.js', import.meta.url));

/**
 * `processes` bare uWebSockets.js servers on one port (bare-http.ts: each request answered 202, after
 * `workUs` of busy CPU, and with `commitDir` after an fdatasync): the floor a service is held against.
 */
export async function startBareHttp(port: number, processes: number, workUs: number, commitDir?: string): Promise<ChildProcessByStdio<null, Readable, null>[]> {
  const args = [BARE_HTTP, String(port), String(workUs), ...(commitDir === undefined ? [] : [commitDir])];
  const servers = Array.from({ length: processes }, () => spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] }));
  await Promise.all(servers.map((server) => new Promise<void>((resolve) => server.stdout.once('data', () => resolve()))));
  return servers;
}
