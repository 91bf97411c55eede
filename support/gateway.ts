// Shared by the tests and the benchmarks (support/). The reference gateway as `make gateway` runs it (scripts/gateway.sh: nginx, and a local Redis unless
// REDIS_URL is given), and HAProxy with deploy/gateway/haproxy.cfg: real processes on free ports.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { freePort } from './ports.js';
import { collectLines } from './lines.js';
import { REPO_ROOT as ROOT } from './repo-root.js';
const running = new Set<ChildProcess>();
process.on('exit', () => {
  for (const p of running) killGroup(p, 'SIGKILL');
});

/** Each gateway runs in a process group of its own: the script, nginx and Redis end together. */
function killGroup(p: ChildProcess, signal: NodeJS.Signals): void {
  if (p.pid === undefined) return;
  try {
    process.kill(-p.pid, signal);
  } catch {
    /* already gone */
  }
}

/** Starts a command in a process group of its own, collecting what it prints; tracked until it exits. */
function spawnGroup(command: string, args: string[], env: NodeJS.ProcessEnv): { proc: ChildProcess; output: string[]; exited: Promise<void> } {
  const proc = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  running.add(proc);
  const output: string[] = [];
  collectLines(proc.stdout!, output);
  collectLines(proc.stderr!, output);
  const exited = new Promise<void>((resolve) =>
    proc.once('exit', () => {
      running.delete(proc);
      resolve();
    }),
  );
  return { proc, output, exited };
}

export interface Gateway {
  url: string;
  port: number;
  /** nginx's master process (its workers are its children). */
  nginxPid(): number;
  /** scripts/gateway.sh's run directory: rendered config, pid files. */
  runDir: string;
  /** The REDIS_URL this gateway counts in. */
  redisUrl: string;
  /** What the script and nginx (its error log) printed. */
  output: string[];
  /** The pid of the Redis the script started (none when REDIS_URL was given). */
  redisPid(): number | null;
  stop(): Promise<void>;
}

export interface GatewayOptions {
  upstream: string;
  /** Share the counters of another gateway's Redis; unset: the script starts one on a free port. */
  redisUrl?: string;
  env?: Record<string, string>;
  /** Another checkout whose scripts/gateway.sh and deploy/gateway to run (a side-by-side benchmark). */
  root?: string;
}

export async function startGateway(opts: GatewayOptions): Promise<Gateway> {
  const port = await freePort();
  const redisPort = opts.redisUrl === undefined ? await freePort() : null;
  const runDir = `${ROOT}.run/gateway/${port}`;
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    GATEWAY_ADDR: `127.0.0.1:${port}`,
    UPSTREAM_ADDR: opts.upstream,
    GATEWAY_WORKERS: '1',
    GATEWAY_RUN_DIR: runDir,
    ...(opts.redisUrl === undefined ? { GATEWAY_REDIS_ADDR: `127.0.0.1:${redisPort}` } : { REDIS_URL: opts.redisUrl }),
    ...opts.env,
  };
  if (opts.redisUrl === undefined) delete env.REDIS_URL;
  const root = opts.root === undefined ? ROOT : opts.root.endsWith('/') ? opts.root : `${opts.root}/`;
  const { proc, output, exited } = spawnGroup('bash', [`${root}scripts/gateway.sh`], env);
  const url = `http://127.0.0.1:${port}`;
  const gateway: Gateway = {
    url,
    port,
    nginxPid: () => Number(readFileSync(`${runDir}/nginx.pid`, 'utf8').trim()),
    runDir,
    redisUrl: opts.redisUrl ?? `redis://127.0.0.1:${redisPort}`,
    output,
    redisPid() {
      if (opts.redisUrl !== undefined) return null;
      return Number(readFileSync(`${runDir}/redis.pid`, 'utf8').trim());
    },
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill('SIGTERM'); // the script stops nginx gracefully, then its Redis
      const timer = setTimeout(() => killGroup(proc, 'SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
  // Up when the gateway itself answers (404 JSON for an unknown path).
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`gateway.sh exited with ${proc.exitCode}:\n${output.join('\n')}`);
    const up = await fetch(`${url}/_up`)
      .then((r) => r.status === 404)
      .catch(() => false);
    if (up) return gateway;
    await new Promise((r) => setTimeout(r, 100));
  }
  killGroup(proc, 'SIGKILL');
  throw new Error(`gateway not answering on ${url} within 60 s:\n${output.join('\n')}`);
}

/**
 * A new API key provisioned in the gateways' Redis (scripts/gateway-keys.sh add): the key itself.
 * `limit`: requests per second, 0 unlimited.
 */
export async function addApiKey(redisUrl: string, name: string, limit: number): Promise<string> {
  return (await gatewayKeys(redisUrl, ['add', name, String(limit)])).trim();
}

/** scripts/gateway-keys.sh with its arguments; what it printed on stdout. */
export function gatewayKeys(redisUrl: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const proc = spawn('bash', [`${ROOT}scripts/gateway-keys.sh`, ...args], {
      env: { ...process.env, REDIS_URL: redisUrl },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
    proc.stderr.on('data', (d: Buffer) => (err += d.toString()));
    proc.once('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`gateway-keys.sh ${args.join(' ')} exited with ${code}: ${err.trim()}`))));
  });
}

export interface Haproxy {
  url: string;
  output: string[];
  stop(): Promise<void>;
}

/** HAProxy with deploy/gateway/haproxy.cfg in front of `upstream`. */
export async function startHaproxy(upstream: string, maxBodyBytes: number): Promise<Haproxy> {
  const port = await freePort();
  const env = { ...process.env, GATEWAY_ADDR: `127.0.0.1:${port}`, UPSTREAM_ADDR: upstream, MAX_BODY_BYTES: String(maxBodyBytes) };
  const { proc, output, exited } = spawnGroup('haproxy', ['-db', '-f', `${ROOT}deploy/gateway/haproxy.cfg`], env);
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) throw new Error(`haproxy exited with ${proc.exitCode}:\n${output.join('\n')}`);
    if (
      await fetch(`${url}/_up`)
        .then((r) => r.status === 404)
        .catch(() => false)
    )
      break;
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    output,
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill('SIGUSR1'); // soft stop
      const timer = setTimeout(() => killGroup(proc, 'SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Stops the gateways a failed test left running (test/setup.ts). */
export async function stopLeftoverGateways(): Promise<void> {
  for (const p of running) killGroup(p, 'SIGTERM');
  const deadline = Date.now() + 10_000;
  while (running.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  for (const p of running) killGroup(p, 'SIGKILL');
}
