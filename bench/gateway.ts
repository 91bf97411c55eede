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
//   GW_COMPARE_ROOT      another checkout: a row through its gateway too (its scripts/gateway.sh, its
//                        defaults; an API key provisioned as this checkout does), and with
//                        GW_IDEMPOTENCY=1 a row with an Idempotency-Key on every request
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BROKERS, createTopic, deleteTopic } from '../support/kafka.js';
import { addApiKey, startGateway, type Gateway } from '../support/gateway.js';
import { freePort } from '../support/ports.js';
import { cpuSeconds, processTree } from './lib/procfs.js';
import { benchPoints } from './lib/points.js';
import { startTarget } from './lib/targets.js';
import { vegetaPath, vegetaAttack, type VegetaReport } from './lib/vegeta.js';
import { envNumber } from './lib/env.js';

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

interface Row {
  name: string;
  report: VegetaReport;
  cpu: { nginx: number | null; redis: number | null; service: number; vegeta: number };
}

function parseVariant(variant: string): Record<string, string> {
  if (variant === 'default') return {};
  return Object.fromEntries(variant.split(',').map((kv) => kv.split('=') as [string, string]));
}

const us = (seconds: number | null, requests: number) => (seconds === null ? '–' : ((seconds * 1e6) / requests).toFixed(1));
const ms = (ns: number) => (ns / 1e6).toFixed(2);

async function main(): Promise<void> {
  const vegeta = vegetaPath();
  const dir = mkdtempSync(join(tmpdir(), 'bench-gateway-'));
  const bodyFile = join(dir, 'body.json');
  writeFileSync(bodyFile, JSON.stringify(benchPoints(POINTS, RUN_ID)));
  const topic = await createTopic(`bench.${RUN_ID}.gateway`);
  const service = await startTarget('ours', await freePort(), { MQ_BROKERS: BROKERS, MQ_TOPIC: topic, WORKERS: '2' });
  const servicePids = processTree(service.proc.pid!);
  console.log(`bench-gateway: ${RATE} requests/s of ${POINTS} point(s), ${SECONDS} s a row (vegeta, open loop${MAX_WORKERS === undefined ? '' : `, -max-workers=${MAX_WORKERS}`}), the service with 2 workers on ${service.url}; ${new Date().toISOString()}`);
  const rows: Row[] = [];
  try {
    // nginxPid: an nginx that is not a gateway (the floor's), whose CPU is counted all the same.
    const measure = async (name: string, url: string, headers: Record<string, string>, gateway: Gateway | null, nginxPid?: number, keyed = false) => {
      const unique = (phase: string) => (keyed ? { uniqueHeader: { name: 'Idempotency-Key', prefix: `${RUN_ID}-${rows.length}-${phase}` } } : {});
      if (WARMUP_SECONDS > 0) await vegetaAttack(vegeta, { url, bodyFile, headers, rate: RATE / 2, seconds: WARMUP_SECONDS, dir, maxWorkers: MAX_WORKERS, ...unique('warm') });
      const nginxMain = gateway?.nginxPid() ?? nginxPid;
      const nginxPids = nginxMain === undefined ? [] : processTree(nginxMain);
      const redisPid = gateway?.redisPid() ?? null;
      const before = { nginx: cpuSeconds(nginxPids), redis: redisPid === null ? 0 : cpuSeconds([redisPid]), service: cpuSeconds(servicePids) };
      const { report, cpuSeconds: vegetaCpu } = await vegetaAttack(vegeta, { url, bodyFile, headers, rate: RATE, seconds: SECONDS, dir, maxWorkers: MAX_WORKERS, ...unique('run') });
      const row: Row = {
        name,
        report,
        cpu: {
          nginx: nginxMain === undefined ? null : cpuSeconds(nginxPids) - before.nginx,
          redis: redisPid === null ? null : cpuSeconds([redisPid]) - before.redis,
          service: cpuSeconds(servicePids) - before.service,
          vegeta: vegetaCpu,
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
    if (env.GW_COMPARE_ROOT !== undefined) {
      const gateway = await startGateway({ upstream: new URL(service.url).host, root: env.GW_COMPARE_ROOT, env: { GATEWAY_RATE_LIMIT: '1000000', GATEWAY_WORKERS: 'auto' } });
      try {
        // A key provisioned the way this checkout does it; a gateway that knows no keys ignores the header.
        const key = await addApiKey(gateway.redisUrl, 'bench', 1_000_000).catch(() => 'bench');
        await measure(`gateway of ${env.GW_COMPARE_ROOT}`, gateway.url, { 'X-Api-Key': key }, gateway);
        if (IDEMPOTENCY) await measure(`gateway of ${env.GW_COMPARE_ROOT}, Idempotency-Key on every request`, gateway.url, { 'X-Api-Key': key }, gateway, undefined, true);
      } finally {
        await gateway.stop();
        rmSync(gateway.runDir, { recursive: true, force: true });
      }
    }
    for (const variant of VARIANTS) {
      const gateway = await startGateway({ upstream: new URL(service.url).host, env: { GATEWAY_RATE_LIMIT: '1000000', GATEWAY_WORKERS: 'auto', ...parseVariant(variant) } });
      try {
        // One fleet's key, with a limit far above the load: every request is looked up and counted, none refused.
        const key = await addApiKey(gateway.redisUrl, 'bench', 1_000_000);
        await measure(`gateway ${variant}`, gateway.url, { 'X-Api-Key': key }, gateway);
        if (IDEMPOTENCY) await measure(`gateway ${variant}, Idempotency-Key on every request`, gateway.url, { 'X-Api-Key': key }, gateway, undefined, true);
      } finally {
        await gateway.stop();
        rmSync(gateway.runDir, { recursive: true, force: true });
      }
    }
  } finally {
    await service.stop();
    await deleteTopic(topic);
    rmSync(dir, { recursive: true, force: true });
  }
  console.log('\n| row | rate sent / held (202 per s) | p50 | p99 | p99.9 | max | not 202 | nginx µs/request | Redis µs/request | service µs/request | vegeta µs/request |');
  console.log('|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of rows) {
    const n = r.report.requests;
    const l = r.report.latencies;
    const not202 = n - (r.report.status_codes['202'] ?? 0);
    console.log(`| ${r.name} | ${Math.round(r.report.rate)} / ${Math.round(r.report.throughput)} | ${ms(l['50th'])} ms | ${ms(l['99th'])} ms | ${ms(l['99.9th'])} ms | ${ms(l.max)} ms | ${not202} | ${us(r.cpu.nginx, n)} | ${us(r.cpu.redis, n)} | ${us(r.cpu.service, n)} | ${us(r.cpu.vegeta, n)} |`);
  }
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

function describe(r: Row): string {
  const n = r.report.requests;
  const l = r.report.latencies;
  const codes = Object.entries(r.report.status_codes).map(([c, k]) => `${c}×${k}`).join(' ');
  return `  ${r.name}: sent ${Math.round(r.report.rate)}/s, 202 ${Math.round(r.report.throughput)}/s; p50 ${ms(l['50th'])} ms, p99 ${ms(l['99th'])} ms, p99.9 ${ms(l['99.9th'])} ms, max ${ms(l.max)} ms; ${codes}; CPU µs/request: nginx ${us(r.cpu.nginx, n)}, Redis ${us(r.cpu.redis, n)}, service ${us(r.cpu.service, n)}, vegeta ${us(r.cpu.vegeta, n)}`;
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
