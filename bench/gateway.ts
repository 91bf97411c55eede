// `make bench-gateway`: what the reference gateway (deploy/gateway: nginx + Lua + Redis) costs and what
// tail it adds, seen through vegeta, an open-loop generator that opens connections as latency grows,
// as most load tools do. One service (2 workers) for the whole run; a row straight to it, then a row
// through a fresh gateway for each variant, side by side. Per row: the rate held, vegeta's latency
// percentiles, and the CPU of nginx (all its processes), Redis and the service per request, from /proc.
//
//   GW_RATE=10000        requests per second
//   GW_SECONDS=20        measured seconds per row (after GW_WARMUP_SECONDS=5 at half the rate)
//   GW_POINTS=1          points per request
//   GW_VARIANTS='default'  the gateway rows: environment sets (A=1,B=2) for
//                        scripts/gateway.sh, `default` for none, separated by ';'
//   GW_DIRECT=1          the row without a gateway (0: skip it)
//   GW_FLOOR=1           a row against a static nginx `return 202` (no service): the generator's own floor,
//                        and what nginx costs when it proxies nothing
//   GW_MAX_WORKERS       vegeta's -max-workers (unset: its default, unbounded)
//   GW_IDEMPOTENCY=1     each gateway variant twice: without an Idempotency-Key, and with a new one on
//                        every request (deploy/gateway/README.md, "Idempotency-Key"): what the key costs
//   GW_LOAD=vegeta       the generator of every row: vegeta, or `paced` (bench/lib/paced-load.ts, the
//                        design load's own: GW_CONNECTIONS=100 kept connections, evenly spaced requests;
//                        a keyed request waits up to 5 ms for its Redis write, so 50 would not hold 10,000/s).
//                        vegeta spends about 400 µs of CPU a request on a unique header (one JSON
//                        target each), so its keyed rows cannot go past about 2,000 requests/s here;
//                        the paced generator writes the header itself and holds the design rate
//   GW_IDEMPOTENCY_FLOOR=1  with GW_IDEMPOTENCY=1, a keyed row through the floor of this design: the
//                        gateway's own Lua cut down (idempotencyFloorLua) so that a keyed request does only
//                        what any gateway keeping keys in Redis must: its key written (SET NX, batched as the
//                        gateway batches it) and waited for; no body fingerprint, no answer kept (0: skip it)
//   GW_COMPARE_ROOT      another checkout: a row through its gateway too (its scripts/gateway.sh, its
//                        defaults; an API key provisioned as this checkout does), and with
//                        GW_IDEMPOTENCY=1 a row with an Idempotency-Key on every request
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BROKERS, createTopic, deleteTopic } from '../support/kafka.js';
import { addApiKey, startGateway, type Gateway } from '../support/gateway.js';
import { freePort } from '../support/ports.js';
import { cpuSeconds, processTree } from './lib/procfs.js';
import { benchPoints } from './lib/points.js';
import { startTarget } from './lib/targets.js';
import { vegetaPath, vegetaAttack, type AttackOptions, type VegetaReport } from './lib/vegeta.js';
import { envNumber } from './lib/env.js';
import { pacedLoad, type PacedResult } from './lib/paced-load.js';

const env = process.env;
const RATE = envNumber('GW_RATE', 10_000);
const SECONDS = envNumber('GW_SECONDS', 20);
const WARMUP_SECONDS = envNumber('GW_WARMUP_SECONDS', 5);
const POINTS = envNumber('GW_POINTS', 1);
const DIRECT = env.GW_DIRECT !== '0';
const FLOOR = env.GW_FLOOR !== '0';
const MAX_WORKERS = env.GW_MAX_WORKERS === undefined ? undefined : Number(env.GW_MAX_WORKERS);
const VARIANTS = (env.GW_VARIANTS ?? 'default').split(';').map((v) => v.trim()).filter(Boolean);
const RUN_ID = `g${Date.now().toString(36)}`;
const IDEMPOTENCY = env.GW_IDEMPOTENCY === '1';
const LOAD = env.GW_LOAD ?? 'vegeta';
if (LOAD !== 'vegeta' && LOAD !== 'paced') throw new Error(`GW_LOAD must be vegeta or paced, got ${LOAD}`);
const CONNECTIONS = envNumber('GW_CONNECTIONS', 100);
const IDEMPOTENCY_FLOOR = IDEMPOTENCY && env.GW_IDEMPOTENCY_FLOOR !== '0';

/** What one row's load saw, from either generator; latencies in ms. */
interface Load {
  requests: number;
  sentPerS: number;
  okPerS: number;
  not202: number;
  codes: string;
  latency: { p50: number; p99: number; p999: number; max: number };
  /** The generator's own CPU seconds. */
  cpu: number;
}

interface Row {
  name: string;
  load: Load;
  cpu: { nginx: number | null; redis: number | null; service: number };
}

const nsToMs = (ns: number) => ns / 1e6;

function fromVegeta(report: VegetaReport, cpu: number): Load {
  const l = report.latencies;
  return {
    requests: report.requests,
    sentPerS: report.rate,
    okPerS: report.throughput,
    not202: report.requests - (report.status_codes['202'] ?? 0),
    codes: Object.entries(report.status_codes).map(([c, k]) => `${c}×${k}`).join(' '),
    latency: { p50: nsToMs(l['50th']), p99: nsToMs(l['99th']), p999: nsToMs(l['99.9th']), max: nsToMs(l.max) },
    cpu,
  };
}

function fromPaced(result: PacedResult, seconds: number, cpu: number): Load {
  return {
    requests: result.requests,
    sentPerS: result.requests / seconds,
    okPerS: result.ok2xx / seconds,
    not202: result.requests - result.ok2xx,
    codes: `2xx×${result.ok2xx} other×${result.non2xx} unanswered×${result.errors}`,
    latency: result.latencyMs,
    cpu,
  };
}

/** vegeta's attack (bodyFile) or the paced generator's (body); -max-workers is GW_MAX_WORKERS's. */
type Attack = Omit<AttackOptions, 'maxWorkers'> & { body: string };

/** One row's load through GW_LOAD's generator. */
async function attack(vegeta: string, a: Attack): Promise<Load> {
  if (LOAD === 'vegeta') {
    const { report, cpuSeconds: cpu } = await vegetaAttack(vegeta, { ...a, maxWorkers: MAX_WORKERS });
    return fromVegeta(report, cpu);
  }
  // The paced generator runs in a worker thread of this process: its CPU is this process's.
  const before = process.cpuUsage();
  const result = await pacedLoad({ url: a.url, path: '/track', body: a.body, headers: a.headers, uniqueHeader: a.uniqueHeader, connections: CONNECTIONS, rate: a.rate, seconds: a.seconds });
  const used = process.cpuUsage(before);
  return fromPaced(result, a.seconds, (used.user + used.system) / 1e6);
}

function parseVariant(variant: string): Record<string, string> {
  if (variant === 'default') return {};
  return Object.fromEntries(variant.split(',').map((kv) => kv.split('=') as [string, string]));
}

const us = (seconds: number | null, requests: number) => (seconds === null ? '–' : ((seconds * 1e6) / requests).toFixed(1));
const ms = (value: number) => value.toFixed(2);

async function main(): Promise<void> {
  const vegeta = LOAD === 'vegeta' ? vegetaPath() : '';
  const dir = mkdtempSync(join(tmpdir(), 'bench-gateway-'));
  const bodyFile = join(dir, 'body.json');
  const body = JSON.stringify(benchPoints(POINTS, RUN_ID));
  writeFileSync(bodyFile, body);
  const topic = await createTopic(`bench.${RUN_ID}.gateway`);
  const service = await startTarget('ours', await freePort(), { MQ_BROKERS: BROKERS, MQ_TOPIC: topic, WORKERS: '2' });
  const servicePids = processTree(service.proc.pid!);
  const generator = LOAD === 'paced' ? `paced, ${CONNECTIONS} connections` : `vegeta, open loop${MAX_WORKERS === undefined ? '' : `, -max-workers=${MAX_WORKERS}`}`;
  console.log(`bench-gateway: ${RATE} requests/s of ${POINTS} point(s), ${SECONDS} s a row (${generator}), the service with 2 workers on ${service.url}; ${new Date().toISOString()}`);
  const rows: Row[] = [];
  try {
    // nginxPid: an nginx that is not a gateway (the floor's), whose CPU is counted all the same.
    const measure = async (name: string, url: string, headers: Record<string, string>, gateway: Gateway | null, nginxPid?: number, keyed = false) => {
      const unique = (phase: string) => (keyed ? { uniqueHeader: { name: 'Idempotency-Key', prefix: `${RUN_ID}-${rows.length}-${phase}` } } : {});
      if (WARMUP_SECONDS > 0) await attack(vegeta, { url, bodyFile, body, headers, rate: RATE / 2, seconds: WARMUP_SECONDS, dir, ...unique('warm') });
      const nginxMain = gateway?.nginxPid() ?? nginxPid;
      const nginxPids = nginxMain === undefined ? [] : processTree(nginxMain);
      const redisPid = gateway?.redisPid() ?? null;
      const before = { nginx: cpuSeconds(nginxPids), redis: redisPid === null ? 0 : cpuSeconds([redisPid]), service: cpuSeconds(servicePids) };
      const load = await attack(vegeta, { url, bodyFile, body, headers, rate: RATE, seconds: SECONDS, dir, ...unique('run') });
      const row: Row = {
        name,
        load,
        cpu: {
          nginx: nginxMain === undefined ? null : cpuSeconds(nginxPids) - before.nginx,
          redis: redisPid === null ? null : cpuSeconds([redisPid]) - before.redis,
          service: cpuSeconds(servicePids) - before.service,
        },
      };
      rows.push(row);
      console.log(describe(row));
    };
    if (FLOOR) {
      const floor = await startStaticNginx(dir);
      try {
        await measure('floor: nginx return 202', floor.url, {}, null, floor.pid);
      } finally {
        await floor.stop();
      }
    }
    if (DIRECT) await measure('direct', service.url, {}, null);
    // A fresh gateway in front of the service, with its Redis: `rows` measured through it, then stopped.
    // One fleet's key, with a limit far above the load: every request is looked up and counted, none refused.
    const throughGateway = async (opts: { root?: string; env?: Record<string, string> }, rows: (url: string, headers: Record<string, string>, gateway: Gateway) => Promise<void>) => {
      const gateway = await startGateway({ upstream: new URL(service.url).host, root: opts.root, env: { GATEWAY_RATE_LIMIT: '1000000', GATEWAY_WORKERS: 'auto', ...opts.env } });
      try {
        // A key provisioned the way this checkout does it; another checkout's gateway that knows no keys ignores the header.
        const key = await addApiKey(gateway.redisUrl, 'bench', 1_000_000).catch((err: unknown) => {
          if (opts.root === undefined) throw err;
          return 'bench';
        });
        await rows(gateway.url, { 'X-Api-Key': key }, gateway);
      } finally {
        await gateway.stop();
        rmSync(gateway.runDir, { recursive: true, force: true });
      }
    };
    const root = env.GW_COMPARE_ROOT;
    if (root !== undefined) {
      await throughGateway({ root }, async (url, headers, gateway) => {
        await measure(`gateway of ${root}`, url, headers, gateway);
        if (IDEMPOTENCY) await measure(`gateway of ${root}, Idempotency-Key on every request`, url, headers, gateway, undefined, true);
      });
    }
    if (IDEMPOTENCY_FLOOR) {
      const luaDir = join(dir, 'floor-lua');
      mkdirSync(luaDir);
      writeFileSync(join(luaDir, 'track_gateway.lua'), idempotencyFloorLua(readFileSync(new URL('../../deploy/gateway/lua/track_gateway.lua', import.meta.url), 'utf8')));
      await throughGateway({ env: { GATEWAY_LUA_DIR: luaDir } }, (url, headers, gateway) =>
        measure('floor: a gateway that only writes each key (SET NX) and waits, Idempotency-Key on every request', url, headers, gateway, undefined, true),
      );
    }
    for (const variant of VARIANTS) {
      await throughGateway({ env: parseVariant(variant) }, async (url, headers, gateway) => {
        await measure(`gateway ${variant}`, url, headers, gateway);
        if (IDEMPOTENCY) await measure(`gateway ${variant}, Idempotency-Key on every request`, url, headers, gateway, undefined, true);
      });
    }
  } finally {
    await service.stop();
    await deleteTopic(topic);
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(`\n| row | rate sent / held (202 per s) | p50 | p99 | p99.9 | max | not 202 | nginx µs/request | Redis µs/request | service µs/request | ${LOAD} µs/request |`);
  console.log('|---|---|---|---|---|---|---|---|---|---|---|');
  for (const { name, load, cpu } of rows) {
    const n = load.requests;
    const l = load.latency;
    console.log(`| ${name} | ${Math.round(load.sentPerS)} / ${Math.round(load.okPerS)} | ${ms(l.p50)} ms | ${ms(l.p99)} ms | ${ms(l.p999)} ms | ${ms(l.max)} ms | ${load.not202} | ${us(cpu.nginx, n)} | ${us(cpu.redis, n)} | ${us(cpu.service, n)} | ${us(load.cpu, n)} |`);
  }
}

/**
 * The gateway's Lua (deploy/gateway/lua/track_gateway.lua) cut down to the floor of keeping keys in
 * Redis: a keyed request's access phase writes its key with the gateway's own batched write (SET NX
 * GET EX) and waits for it, then the request is passed on; the body is not read or hashed, the key not
 * hashed, no answer kept or released. Everything else (API keys, rate limits, the batching) is the
 * gateway's. Throws when the functions it cuts are no longer where it expects them.
 */
function idempotencyFloorLua(source: string): string {
  const cut = (text: string, from: string, to: string, replacement: string) => {
    const start = text.indexOf(from);
    const end = text.indexOf(to, start);
    if (start < 0 || end < 0) throw new Error(`GW_IDEMPOTENCY_FLOOR: track_gateway.lua has no "${from}" followed by "${to}"; update idempotencyFloorLua`);
    return text.slice(0, start) + replacement + text.slice(end);
  };
  let lua = cut(source, 'local function idempotency_access(bucket, key)', '--- body_filter of /track', 'local function idempotency_access(bucket, key)\n  idem_call("reserve", IDEM_PREFIX .. bucket .. ":" .. key, "p")\nend\n\n');
  lua = cut(lua, 'function M.idempotency_body()', '--- A 202 is kept', 'function M.idempotency_body() end\n\n');
  lua = cut(lua, 'function M.idempotency_done()', 'function M.access()', 'function M.idempotency_done() end\n\n');
  return lua;
}

/** nginx answering 202 to anything, access log off: what the generator and loopback alone cost. */
async function startStaticNginx(dir: string): Promise<{ url: string; pid: number; stop(): Promise<void> }> {
  const port = await freePort();
  const conf = join(dir, 'static.conf');
  writeFileSync(
    conf,
    `worker_processes 1; pid ${dir}/static.pid; error_log ${dir}/static.log warn; daemon off;
events { worker_connections 8192; }
http { access_log off; client_body_temp_path ${dir}; server { listen 127.0.0.1:${port}; location / { return 202 '{"accepted":1}'; } } }\n`,
  );
  const proc = spawn('nginx', ['-p', dir, '-c', conf], { stdio: 'inherit' });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 50 && !(await fetch(url).then(() => true).catch(() => false)); i++) await new Promise((r) => setTimeout(r, 100));
  return {
    url,
    pid: proc.pid!,
    stop: () =>
      new Promise<void>((resolve) => {
        proc.once('exit', () => resolve());
        proc.kill('SIGTERM');
      }),
  };
}

function describe({ name, load, cpu }: Row): string {
  const n = load.requests;
  const l = load.latency;
  return `  ${name}: sent ${Math.round(load.sentPerS)}/s, 202 ${Math.round(load.okPerS)}/s; p50 ${ms(l.p50)} ms, p99 ${ms(l.p99)} ms, p99.9 ${ms(l.p999)} ms, max ${ms(l.max)} ms; ${load.codes}; CPU µs/request: nginx ${us(cpu.nginx, n)}, Redis ${us(cpu.redis, n)}, service ${us(cpu.service, n)}, ${LOAD} ${us(load.cpu, n)}`;
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
