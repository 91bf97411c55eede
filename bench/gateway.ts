// `make bench-gateway`: what the reference gateway (deploy/gateway: nginx + Lua + Redis) costs and what
// tail it adds, seen through vegeta, an open-loop generator that opens connections as latency grows,
// as most load tools do. One service (2 workers) and every target started once for the whole run: the
// service straight, a plain nginx proxy, a gateway for each variant (and another checkout's); then
// GW_ROUNDS rounds, each a row per target, alternating. Per row: the rate held, the latency
// percentiles, and the CPU of nginx (all its processes), Redis and the service per request, from /proc;
// then each gateway's nginx + Redis CPU over the plain proxy's and the compared gateway's, by round.
//
//   GW_RATE=10000        requests per second
//   GW_SECONDS=20        measured seconds per row (after GW_WARMUP_SECONDS=5 at half the rate)
//   GW_POINTS=1          points per request
//   GW_VARIANTS='default'  the gateway rows: environment sets (A=1,B=2) for
//                        scripts/gateway.sh, `default` for none, separated by ';'
//   GW_DIRECT=1          the row without a gateway (0: skip it)
//   GW_PROXY=1           a row through a plain nginx proxy_pass to the service, no Lua (0: skip it)
//   GW_ROUNDS=1          rounds; every other one runs the rows in reverse order
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
//   GW_COMPARE_ROOT      other checkouts, separated by ',' (git worktree add DIR COMMIT): a row through each one's gateway too
//                        (its scripts/gateway.sh, its defaults; an API key provisioned as this checkout
//                        does), and with GW_IDEMPOTENCY=1 a row with an Idempotency-Key on every request
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { release, tmpdir } from 'node:os';
import { join } from 'node:path';
import { BROKERS, createTopic, deleteTopic } from '../support/kafka.js';
import { addApiKey, startGateway } from '../support/gateway.js';
import { freePort } from '../support/ports.js';
import { cpuModel, cpuSeconds, processTree } from './lib/procfs.js';
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
const VARIANTS = (env.GW_VARIANTS ?? 'default')
  .split(';')
  .map((v) => v.trim())
  .filter(Boolean);
const RUN_ID = `g${Date.now().toString(36)}`;
const IDEMPOTENCY = env.GW_IDEMPOTENCY === '1';
const LOAD = env.GW_LOAD ?? 'vegeta';
if (LOAD !== 'vegeta' && LOAD !== 'paced') throw new Error(`GW_LOAD must be vegeta or paced, got ${LOAD}`);
const CONNECTIONS = envNumber('GW_CONNECTIONS', 100);
const IDEMPOTENCY_FLOOR = IDEMPOTENCY && env.GW_IDEMPOTENCY_FLOOR !== '0';
const PROXY = env.GW_PROXY !== '0';
const ROUNDS = envNumber('GW_ROUNDS', 1);
const COMPARE_ROOTS = (env.GW_COMPARE_ROOT ?? '').split(',').filter(Boolean);

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
  round: number;
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
    codes: Object.entries(report.status_codes)
      .map(([c, k]) => `${c}×${k}`)
      .join(' '),
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
  const result = await pacedLoad({
    url: a.url,
    path: '/track',
    body: a.body,
    headers: a.headers,
    uniqueHeader: a.uniqueHeader,
    connections: CONNECTIONS,
    rate: a.rate,
    seconds: a.seconds,
  });
  const used = process.cpuUsage(before);
  return fromPaced(result, a.seconds, (used.user + used.system) / 1e6);
}

function parseVariant(variant: string): Record<string, string> {
  if (variant === 'default') return {};
  return Object.fromEntries(variant.split(',').map((kv) => kv.split('=') as [string, string]));
}

const us = (seconds: number | null, requests: number) => (seconds === null ? '–' : ((seconds * 1e6) / requests).toFixed(1));
const ms = (value: number) => value.toFixed(2);

/** Something a row's load is sent to, started once for the whole run; its nginx and Redis, when it has them. */
interface Target {
  name: string;
  url: string;
  headers: Record<string, string>;
  keyed: boolean;
  nginxPid?: number;
  redisPid: number | null;
}

async function main(): Promise<void> {
  const vegeta = LOAD === 'vegeta' ? vegetaPath() : '';
  const dir = mkdtempSync(join(tmpdir(), 'bench-gateway-'));
  const bodyFile = join(dir, 'body.json');
  const body = JSON.stringify(benchPoints(POINTS, RUN_ID));
  writeFileSync(bodyFile, body);
  const topic = await createTopic(`bench.${RUN_ID}.gateway`);
  const service = await startTarget('ours', await freePort(), { MQ_BROKERS: BROKERS, MQ_TOPIC: topic, WORKERS: '2' });
  const servicePids = processTree(service.proc.pid!);
  const generator =
    LOAD === 'paced' ? `paced, ${CONNECTIONS} connections` : `vegeta, open loop${MAX_WORKERS === undefined ? '' : `, -max-workers=${MAX_WORKERS}`}`;
  console.log(
    `bench-gateway: ${RATE} requests/s of ${POINTS} point(s), ${SECONDS} s a row (${generator}), ${ROUNDS} round(s), the service with 2 workers on ${service.url}; ${cpuModel()}, Linux ${release()}; ${new Date().toISOString()}`,
  );
  const rows: Row[] = [];
  const targets: Target[] = [];
  const stops: (() => Promise<void>)[] = [];
  const measure = async (t: Target, round: number) => {
    const unique = (phase: string) => (t.keyed ? { uniqueHeader: { name: 'Idempotency-Key', prefix: `${RUN_ID}-${rows.length}-${phase}` } } : {});
    const { url, headers } = t;
    if (WARMUP_SECONDS > 0) await attack(vegeta, { url, bodyFile, body, headers, rate: RATE / 2, seconds: WARMUP_SECONDS, dir, ...unique('warm') });
    const nginxPids = t.nginxPid === undefined ? [] : processTree(t.nginxPid);
    const before = { nginx: cpuSeconds(nginxPids), redis: t.redisPid === null ? 0 : cpuSeconds([t.redisPid]), service: cpuSeconds(servicePids) };
    const load = await attack(vegeta, { url, bodyFile, body, headers, rate: RATE, seconds: SECONDS, dir, ...unique('run') });
    const row: Row = {
      name: t.name,
      round,
      load,
      cpu: {
        nginx: t.nginxPid === undefined ? null : cpuSeconds(nginxPids) - before.nginx,
        redis: t.redisPid === null ? null : cpuSeconds([t.redisPid]) - before.redis,
        service: cpuSeconds(servicePids) - before.service,
      },
    };
    rows.push(row);
    console.log(describe(row));
  };
  // A fresh gateway in front of the service, with its Redis, kept for the run: its rows (without the
  // header, then with it when GW_IDEMPOTENCY=1). One fleet's key, with a limit far above the load:
  // every request is looked up and counted, none refused.
  const addGateway = async (name: string, opts: { root?: string; env?: Record<string, string>; keyedOnly?: boolean }) => {
    const gateway = await startGateway({
      upstream: new URL(service.url).host,
      root: opts.root,
      env: { GATEWAY_RATE_LIMIT: '1000000', GATEWAY_WORKERS: 'auto', ...opts.env },
    });
    stops.push(async () => {
      await gateway.stop();
      rmSync(gateway.runDir, { recursive: true, force: true });
    });
    // A key provisioned the way this checkout does it; another checkout's gateway that knows no keys ignores the header.
    const key = await addApiKey(gateway.redisUrl, 'bench', 1_000_000).catch((err: unknown) => {
      if (opts.root === undefined) throw err;
      return 'bench';
    });
    const base = { url: gateway.url, headers: { 'X-Api-Key': key }, nginxPid: gateway.nginxPid(), redisPid: gateway.redisPid() };
    if (!opts.keyedOnly) targets.push({ ...base, name, keyed: false });
    if (IDEMPOTENCY || opts.keyedOnly) targets.push({ ...base, name: opts.keyedOnly ? name : `${name}, Idempotency-Key on every request`, keyed: true });
  };
  try {
    if (FLOOR) {
      const floor = await startNginx(dir, 'static', `location / { return 202 '{"accepted":1}'; }`);
      stops.push(floor.stop);
      targets.push({ name: 'floor: nginx return 202', url: floor.url, headers: {}, keyed: false, nginxPid: floor.pid, redisPid: null });
    }
    if (DIRECT) targets.push({ name: 'direct', url: service.url, headers: {}, keyed: false, redisPid: null });
    if (PROXY) {
      const upstream = new URL(service.url).host;
      const proxy = await startNginx(
        dir,
        'proxy',
        PLAIN_PROXY,
        `upstream service { server ${upstream} max_fails=0; keepalive 64; keepalive_timeout 4s; keepalive_requests 100000; }`,
      );
      stops.push(proxy.stop);
      targets.push({ name: 'plain proxy: nginx proxy_pass, no Lua', url: proxy.url, headers: {}, keyed: false, nginxPid: proxy.pid, redisPid: null });
    }
    for (const root of COMPARE_ROOTS) await addGateway(`gateway of ${root}`, { root });
    if (IDEMPOTENCY_FLOOR) {
      const luaDir = join(dir, 'floor-lua');
      mkdirSync(luaDir);
      writeFileSync(
        join(luaDir, 'track_gateway.lua'),
        idempotencyFloorLua(readFileSync(new URL('../../deploy/gateway/lua/track_gateway.lua', import.meta.url), 'utf8')),
      );
      await addGateway('floor: a gateway that only writes each key (SET NX) and waits, Idempotency-Key on every request', {
        env: { GATEWAY_LUA_DIR: luaDir },
        keyedOnly: true,
      });
    }
    for (const variant of VARIANTS) await addGateway(`gateway ${variant}`, { env: parseVariant(variant) });
    // Alternating: every target once a round, the order reversed every other round, so that a drift
    // of the machine over the run falls on each alike.
    for (let round = 1; round <= ROUNDS; round++) {
      for (const t of round % 2 === 1 ? targets : [...targets].reverse()) await measure(t, round);
    }
  } finally {
    for (const stop of stops.reverse()) await stop();
    await service.stop();
    await deleteTopic(topic);
    rmSync(dir, { recursive: true, force: true });
  }
  console.log(
    `\n| round | row | rate sent / held (202 per s) | p50 | p99 | p99.9 | max | not 202 | nginx µs/request | Redis µs/request | service µs/request | ${LOAD} µs/request |`,
  );
  console.log('|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const { name, round, load, cpu } of rows) {
    const n = load.requests;
    const l = load.latency;
    console.log(
      `| ${round} | ${name} | ${Math.round(load.sentPerS)} / ${Math.round(load.okPerS)} | ${ms(l.p50)} ms | ${ms(l.p99)} ms | ${ms(l.p999)} ms | ${ms(l.max)} ms | ${load.not202} | ${us(cpu.nginx, n)} | ${us(cpu.redis, n)} | ${us(cpu.service, n)} | ${us(load.cpu, n)} |`,
    );
  }
  printRatios(rows);
}

/** nginx + Redis µs a request of a row (null: a row without nginx). */
const gatewayUs = (r: Row) => (r.cpu.nginx === null ? null : ((r.cpu.nginx + (r.cpu.redis ?? 0)) * 1e6) / r.load.requests);

/**
 * The same over the generator's own CPU a request in that row. The generator does the same work in
 * every row (one request, one answer), so this takes out how fast the machine ran during the row: on
 * a shared 2-core machine the service's and the generator's own CPU a request drift by 10 to 15 %
 * within one run, as much as the differences measured.
 */
const gatewayPerGenerator = (r: Row) => {
  const us = gatewayUs(r);
  return us === null || r.load.cpu <= 0 ? null : us / ((r.load.cpu * 1e6) / r.load.requests);
};

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/**
 * Each gateway row's nginx + Redis CPU over the plain proxy's nginx and over each compared checkout's
 * gateway (its row of the same kind: keyed or not): round by round, as measured and as a share of the
 * generator's CPU (gatewayPerGenerator), then the median over the rounds of the latter.
 */
function printRatios(rows: readonly Row[]): void {
  const rounds = [...new Set(rows.map((r) => r.round))];
  const names = [...new Set(rows.filter((r) => r.name.startsWith('gateway ') && !r.name.startsWith('gateway of ')).map((r) => r.name))];
  if (names.length === 0) return;
  const of = (round: number, pick: (name: string) => boolean) => rows.find((r) => r.round === round && pick(r.name));
  console.log("\nnginx + Redis CPU a request, ratios: measured / over the generator's CPU, by round; then the median of the latter");
  for (const name of names) {
    const keyed = name.includes('Idempotency-Key');
    const against: [string, (n: string) => boolean][] = [
      ['the plain proxy', (n) => n.startsWith('plain proxy')],
      ...COMPARE_ROOTS.map((root): [string, (n: string) => boolean] => [
        root,
        (n) => n.startsWith(`gateway of ${root}`) && n.includes('Idempotency-Key') === keyed,
      ]),
    ];
    console.log(`  ${name}:`);
    for (const [label, pick] of against) {
      const normalized: number[] = [];
      const perRound = rounds.map((round) => {
        const row = of(round, (n) => n === name);
        const other = of(round, pick);
        if (!row || !other) return '–';
        const [a, b, na, nb] = [gatewayUs(row), gatewayUs(other), gatewayPerGenerator(row), gatewayPerGenerator(other)];
        if (!a || !b || !na || !nb) return '–';
        normalized.push(na / nb);
        return `${(a / b).toFixed(3)} / ${(na / nb).toFixed(3)}`;
      });
      if (normalized.length > 0) console.log(`    × ${label}: ${perRound.join(', ')}; median ${median(normalized).toFixed(3)}`);
    }
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
  let lua = cut(
    source,
    'local function idempotency_access(bucket, key)',
    '--- body_filter of /track',
    'local function idempotency_access(bucket, key)\n  idem_call("reserve", IDEM_PREFIX .. bucket .. ":" .. key, "p")\nend\n\n',
  );
  lua = cut(lua, 'function M.idempotency_body()', '--- A 202 is kept', 'function M.idempotency_body() end\n\n');
  lua = cut(lua, 'function M.idempotency_done()', 'function M.access()', 'function M.idempotency_done() end\n\n');
  return lua;
}

/**
 * The plain proxy row's location: nginx in front of the service as anyone would put it there, no Lua,
 * with the gateway's own upstream settings (HTTP/1.1 over a keep-alive pool, the body read whole first).
 */
const PLAIN_PROXY = `client_max_body_size 1m; client_body_buffer_size 1m;
location = /track { proxy_pass http://service; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header Host $host;
  proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for; proxy_request_buffering on; proxy_buffering on; }`;

/**
 * An nginx of the bench's own, access log off, with one server: `name` 'static' (the floor: one worker
 * answering 202 to anything, what the generator and loopback alone cost) or 'proxy' (as many workers as
 * the gateway's, GATEWAY_WORKERS=auto).
 */
async function startNginx(dir: string, name: 'static' | 'proxy', server: string, http = ''): Promise<{ url: string; pid: number; stop(): Promise<void> }> {
  const port = await freePort();
  const conf = join(dir, `${name}.conf`);
  writeFileSync(
    conf,
    `worker_processes ${name === 'static' ? 1 : 'auto'}; pid ${dir}/${name}.pid; error_log ${dir}/${name}.log warn; daemon off;
events { worker_connections 8192; }
http { access_log off; client_body_temp_path ${dir}; proxy_temp_path ${dir}; ${http} server { listen 127.0.0.1:${port}; ${server} } }\n`,
  );
  const proc = spawn('nginx', ['-p', dir, '-c', conf], { stdio: 'inherit' });
  const url = `http://127.0.0.1:${port}`;
  for (
    let i = 0;
    i < 50 &&
    !(await fetch(url)
      .then(() => true)
      .catch(() => false));
    i++
  )
    await new Promise((r) => setTimeout(r, 100));
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

function describe({ name, round, load, cpu }: Row): string {
  const n = load.requests;
  const l = load.latency;
  return `  round ${round}, ${name}: sent ${Math.round(load.sentPerS)}/s, 202 ${Math.round(load.okPerS)}/s; p50 ${ms(l.p50)} ms, p99 ${ms(l.p99)} ms, p99.9 ${ms(l.p999)} ms, max ${ms(l.max)} ms; ${load.codes}; CPU µs/request: nginx ${us(cpu.nginx, n)}, Redis ${us(cpu.redis, n)}, service ${us(cpu.service, n)}, ${LOAD} ${us(load.cpu, n)}`;
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
