// `make bench`: the benchmark suite. Every scenario runs ours and the baseline with the same load, in
// the same run, against the local Kafka; results go to bench/results/ (JSON, Markdown, SVG).
// See bench/README.md for what is measured and how.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import Kafka from '@confluentinc/kafka-javascript';
import { loadConfig } from '../src/config.js';
import { producerSettings } from '../src/kafka/settings.js';
import { BROKERS, createTopic, deleteTopic } from '../support/kafka.js';
import { addApiKey, startGateway, type Gateway } from '../support/gateway.js';
import { freePort } from '../support/ports.js';
import { waitForDelivery } from './lib/delivery.js';
import { cpuModel, cpuSeconds, peakRssBytes, processTree } from './lib/procfs.js';
import { DESIGN_LOAD } from './lib/design-load.js';
import { pacedLoad } from './lib/paced-load.js';
import { histogramQuantile, seriesValue } from './lib/prom-text.js';
import { vegetaAttack, vegetaPath } from './lib/vegeta.js';
import { markdown, svgChart, type ScenarioResult } from './lib/report.js';
import { startTarget, type Impl } from './lib/targets.js';
import { benchPoints } from './lib/points.js';
import { envNumber } from './lib/env.js';

/** The Kafka that scripts/kafka.sh runs: its Maven project names it (scripts/kafka/pom.xml). */
function localKafkaVersion(): string {
  return /<kafka\.version>([^<]+)<\/kafka\.version>/.exec(readFileSync(new URL('../../scripts/kafka/pom.xml', import.meta.url), 'utf8'))?.[1] ?? 'unknown';
}

const env = process.env;
const DESIGN_SECONDS = envNumber('BENCH_DESIGN_SECONDS', 60);
const SAT_SECONDS = envNumber('BENCH_SAT_SECONDS', 10);
const WARMUP_SECONDS = envNumber('BENCH_WARMUP_SECONDS', 3);
const LOAD_THREADS = envNumber('BENCH_LOAD_THREADS', 1);
const BATCHES = (env.BENCH_BATCHES ?? '1,10,100,1000').split(',').map(Number);
const IMPLS = (env.BENCH_IMPLS ?? 'ours:1,ours:2,baseline:1').split(',').map((s) => {
  const [impl, workers] = s.split(':');
  return { impl: impl as Impl, workers: Number(workers ?? 1) };
});
const ONLY = env.BENCH_ONLY; // "design" or "saturation"
// The design load also through autocannon's own fixed rate (`-R`), for comparison (see paced-load.ts).
const DESIGN_AUTOCANNON = env.BENCH_DESIGN_AUTOCANNON !== '0';
// The design load through the reference gateway (nginx + Redis, deploy/gateway) as well.
const DESIGN_GATEWAY = env.BENCH_DESIGN_GATEWAY !== '0';
// The design load through vegeta as well (an open loop that opens connections as latency grows).
const DESIGN_VEGETA = env.BENCH_DESIGN_VEGETA !== '0';
// The baseline at the design load too (BENCH_DESIGN_BASELINE=0: ours alone, e.g. one build against another).
const DESIGN_BASELINE = env.BENCH_DESIGN_BASELINE !== '0';
const RUN_ID = `r${Date.now().toString(36)}`;

interface Shape {
  name: string;
  kind: 'design' | 'saturation';
  points: number;
  connections: number;
  rate: number | null; // requests per second overall, or null for closed loop
  seconds: number;
  generator: 'paced' | 'autocannon' | 'vegeta';
}

/** What the scenarios read from a load run, whichever generator made it. */
interface LoadResult {
  requests: number;
  ok2xx: number;
  non2xx: number;
  errors: number;
  latencyMs: ScenarioResult['latencyMs'];
  /** The paced generator: requests that waited for a free connection (the service was behind). */
  queued?: number;
}

function body(points: number): string {
  return JSON.stringify(benchPoints(points, RUN_ID));
}

async function load(url: string, payload: string, shape: Shape, seconds: number, threads: number, headers: Record<string, string> = {}): Promise<LoadResult> {
  if (shape.generator === 'paced' && shape.rate !== null) {
    return pacedLoad({ url, path: '/track', body: payload, headers, connections: shape.connections, rate: shape.rate, seconds });
  }
  if (shape.generator === 'vegeta' && shape.rate !== null) {
    const dir = mkdtempSync(join(tmpdir(), 'bench-vegeta-'));
    try {
      const bodyFile = join(dir, 'body.json');
      writeFileSync(bodyFile, payload);
      const { report } = await vegetaAttack(vegetaPath(), { url, bodyFile, headers, rate: shape.rate, seconds, dir });
      const ok2xx = Object.entries(report.status_codes).reduce((n, [code, count]) => n + (code.startsWith('2') ? count : 0), 0);
      const errors = report.status_codes['0'] ?? 0;
      const ms = (ns: number) => ns / 1e6;
      const l = report.latencies;
      return {
        requests: report.requests,
        ok2xx,
        non2xx: report.requests - ok2xx - errors,
        errors,
        latencyMs: { p50: ms(l['50th']), p90: ms(l['90th']), p99: ms(l['99th']), p999: ms(l['99.9th']), max: ms(l.max) },
      };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  const opts: autocannon.Options = {
    url: `${url}/track`,
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: payload,
    connections: shape.connections,
    duration: seconds,
    pipelining: 1,
  };
  // autocannon applies overallRate in each worker thread: divide it among them.
  if (shape.rate !== null) opts.overallRate = Math.round(shape.rate / Math.max(1, threads));
  if (threads > 0) (opts as autocannon.Options & { workers: number }).workers = threads;
  const r = await autocannon(opts);
  const l = r.latency as unknown as Record<string, number>;
  return {
    requests: r.requests.total,
    ok2xx: r['2xx'],
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
    latencyMs: { p50: r.latency.p50, p90: r.latency.p90, p99: r.latency.p99, p999: l.p99_9 ?? NaN, max: r.latency.max },
  };
}

/** Reads the whole topic and counts the messages whose key carries this run's id. */
async function countDelivered(topic: string, expected: number): Promise<number> {
  const consumer = new Kafka.KafkaConsumer(
    { 'metadata.broker.list': BROKERS, 'group.id': `bench-${RUN_ID}-${topic}`, 'enable.auto.commit': false },
    { 'auto.offset.reset': 'earliest' },
  );
  await new Promise<void>((res, rej) => consumer.connect({ timeout: 15_000 }, (e) => (e ? rej(e) : res())));
  consumer.assign(Array.from({ length: 6 }, (_, partition) => ({ topic, partition, offset: 0 })));
  let count = 0;
  let idleSince = Date.now();
  const deadline = Date.now() + 120_000;
  while (Date.now() < deadline && Date.now() - idleSince < (count >= expected ? 1_000 : 10_000)) {
    const batch = await new Promise<Kafka.Message[]>((res, rej) => consumer.consume(10_000, (e, m) => (e ? rej(e) : res(m))));
    for (const m of batch) if (m.key?.toString().startsWith(RUN_ID)) count++;
    if (batch.length > 0) idleSince = Date.now();
  }
  await new Promise<void>((res) => consumer.disconnect(() => res()));
  return count;
}

function loadGeneratorName(shape: Shape): string {
  if (shape.generator === 'paced' || shape.generator === 'vegeta') return shape.generator;
  return shape.rate === null ? 'autocannon' : 'autocannon -R';
}

async function runScenario(impl: Impl, workers: number, shape: Shape, via: 'direct' | 'gateway' = 'direct'): Promise<ScenarioResult> {
  const topic = await createTopic(`bench.${RUN_ID}.${impl}${workers}.${via}.${shape.name.replace(/[^a-z0-9]+/gi, '-')}`);
  const target = await startTarget(impl, await freePort(), { MQ_BROKERS: BROKERS, MQ_TOPIC: topic, WORKERS: String(workers) });
  // The gateway as `make gateway` runs it, access log on, API keys required: one fleet's key whose
  // limit is far above the load, so that every request is looked up and counted but none refused.
  let gateway: Gateway | null = null;
  const headers: Record<string, string> = {};
  const payload = body(shape.points);
  const label = `${shape.name} ${impl}${impl === 'ours' ? ` W=${workers}` : ''}${via === 'gateway' ? ' via gateway' : ''}${shape.kind === 'design' ? ` (${loadGeneratorName(shape)})` : ''}`;
  let accepted = 0;
  try {
    if (via === 'gateway') {
      gateway = await startGateway({ upstream: new URL(target.url).host, env: { GATEWAY_WORKERS: 'auto' } });
      headers['X-Api-Key'] = await addApiKey(gateway.redisUrl, 'bench', 1_000_000);
    }
    const url = gateway?.url ?? target.url;
    if (impl === 'ours') await new Promise((r) => setTimeout(r, 1_000)); // every worker's producer connected
    if (WARMUP_SECONDS > 0) {
      const warm = await load(url, payload, { ...shape, rate: shape.rate === null ? null : shape.rate / 2 }, WARMUP_SECONDS, LOAD_THREADS, headers);
      accepted += warm.ok2xx * shape.points;
    }
    const pids = processTree(target.proc.pid!);
    const nginxPids = gateway === null ? [] : processTree(gateway.nginxPid());
    const redisPids = gateway === null ? [] : [gateway.redisPid()!];
    // Scraped before the CPU is read, as metricsAfter is after: the window's CPU leaves both scrapes out.
    const metricsBefore = impl === 'ours' ? await (await fetch(`${target.url}/metrics`)).text() : '';
    const cpu0 = cpuSeconds(pids);
    const nginx0 = cpuSeconds(nginxPids);
    const redis0 = cpuSeconds(redisPids);
    const gen0 = process.cpuUsage();
    const t0 = performance.now();
    const progress = setInterval(() => {
      process.stderr.write(`\r  ${label}: ${Math.round((performance.now() - t0) / 1000)}/${shape.seconds} s   `);
    }, 1_000);
    const r = await load(url, payload, shape, shape.seconds, LOAD_THREADS, headers);
    clearInterval(progress);
    const wall = (performance.now() - t0) / 1000;
    const serviceCpu = cpuSeconds(pids) - cpu0;
    const nginxCpu = cpuSeconds(nginxPids) - nginx0;
    const redisCpu = cpuSeconds(redisPids) - redis0;
    const gen = process.cpuUsage(gen0);
    const rss = peakRssBytes(pids);
    const metricsAfter = impl === 'ours' ? await (await fetch(`${target.url}/metrics`)).text() : '';
    accepted += r.ok2xx * shape.points;
    const pointsInWindow = r.ok2xx * shape.points;
    // Let both implementations finish delivering before they are stopped: the baseline's shutdown
    // does not wait for kafkajs sends in flight, and the comparison is about the steady state.
    await waitForDelivery(topic, accepted);
    await gateway?.stop();
    if (gateway !== null) rmSync(gateway.runDir, { recursive: true, force: true }); // its access log
    const code = await target.stop();
    const delivered = await countDelivered(topic, accepted);
    // librdkafka's statistics windows at the end of the measured window (see ingest_delivery_latency_estimate_seconds).
    const p50 = seriesValue(metricsAfter, 'ingest_delivery_latency_estimate_seconds{quantile="0.5"}');
    const p99 = seriesValue(metricsAfter, 'ingest_delivery_latency_estimate_seconds{quantile="0.99"}');
    const serviceP99 = impl === 'ours' ? histogramQuantile(metricsBefore, metricsAfter, 'ingest_http_request_duration_seconds', 0.99) : null;
    const result: ScenarioResult = {
      name: shape.name,
      kind: shape.kind,
      impl,
      via,
      gatewayCpuMicrosPerRequest: gateway === null || r.requests === 0 ? null : { nginx: (nginxCpu * 1e6) / r.requests, redis: (redisCpu * 1e6) / r.requests },
      workers,
      pointsPerRequest: shape.points,
      connections: shape.connections,
      seconds: shape.seconds,
      targetRate: shape.rate,
      loadGenerator: loadGeneratorName(shape),
      requests: r.requests,
      non2xx: r.non2xx,
      errors: r.errors,
      requestsPerSecond: r.ok2xx / wall,
      pointsPerSecond: pointsInWindow / wall,
      latencyMs: r.latencyMs,
      serviceCpuSeconds: serviceCpu,
      cpuMicrosPerPoint: pointsInWindow > 0 ? (serviceCpu * 1e6) / pointsInWindow : NaN,
      cpuMicrosPerRequest: r.ok2xx > 0 ? (serviceCpu * 1e6) / r.ok2xx : NaN,
      pointsPerCpuSecond: serviceCpu > 0 ? pointsInWindow / serviceCpu : NaN,
      servicePeakRssMiB: rss / 2 ** 20,
      loadGeneratorCpuPercent: ((gen.user + gen.system) / 1e6 / wall) * 100,
      accepted,
      delivered,
      deliveryLatencyMs: p50 === null || p99 === null ? null : { p50: p50 * 1000, p99: p99 * 1000 },
      serviceP99Ms: serviceP99 === null ? null : serviceP99 * 1000,
      waitedForConnection: r.queued ?? null,
    };
    process.stderr.write(
      `\r  ${label}: ${Math.round(result.pointsPerSecond)} points/s, p99 ${result.latencyMs.p99} ms, ${result.cpuMicrosPerPoint.toFixed(2)} µs CPU/point, delivered ${delivered}/${accepted}, exit ${code}\n`,
    );
    return result;
  } finally {
    await gateway?.stop();
    if (target.proc.exitCode === null) await target.stop();
    await deleteTopic(topic);
  }
}

async function main() {
  const config = loadConfig({ ...env, MQ_BROKERS: BROKERS });
  const settings = producerSettings(config, 'bench');
  const meta: Record<string, string> = {
    date: new Date().toISOString(),
    run: RUN_ID,
    commit: execFileSync('git', ['rev-parse', '--short', 'HEAD']).toString().trim(),
    node: process.version,
    cpu: `${cpuModel()} × ${cpus().length}`,
    memory: `${Math.round(totalmem() / 2 ** 30)} GiB`,
    broker: `${BROKERS} (scripts/kafka.sh, Apache Kafka ${localKafkaVersion()}, one broker on the same machine)`,
    'producer (ours)': `librdkafka ${Kafka.librdkafkaVersion}: linger.ms=${settings.global['linger.ms']}, batch.num.messages=${settings.global['batch.num.messages']}, enable.idempotence=${settings.global['enable.idempotence']}, acks=all, partitioner=murmur2_random`,
    'producer (baseline)': 'kafkajs 2.2.4, idempotent, acks=-1, one send() per request, default partitioner (murmur2)',
    'load generator': `design load: evenly paced open loop (bench/lib/paced-load.ts), one worker thread${DESIGN_AUTOCANNON ? ', and autocannon overallRate for comparison' : ''}${DESIGN_GATEWAY ? '; once more through the reference gateway (nginx + Lua + Redis, deploy/gateway)' : ''}${DESIGN_VEGETA ? '; and with vegeta (open loop, github.com/tsenart/vegeta), direct and through the gateway' : ''}; saturation: autocannon, ${LOAD_THREADS} worker thread(s), pipelining 1; both in this runner's process`,
    note: 'load generator, service and broker share the machine: compare ratios and CPU per point, not absolute rates',
  };
  console.log(
    Object.entries(meta)
      .map(([k, v]) => `${k}: ${v}`)
      .join('\n'),
  );

  const shapes: Shape[] = [];
  if (ONLY !== 'saturation') {
    for (const [name, shape] of Object.entries(DESIGN_LOAD))
      shapes.push({ name: `design ${name}`, kind: 'design', ...shape, seconds: DESIGN_SECONDS, generator: 'paced' });
  }
  if (ONLY !== 'design') {
    for (const b of BATCHES)
      shapes.push({
        name: `batch ${b}`,
        kind: 'saturation',
        points: b,
        connections: b >= 1000 ? 8 : 32,
        rate: null,
        seconds: SAT_SECONDS,
        generator: 'autocannon',
      });
  }
  const results: ScenarioResult[] = [];
  for (const shape of shapes) {
    console.log(`${shape.name}:`);
    const impls =
      shape.kind === 'design'
        ? [{ impl: 'ours' as Impl, workers: config.workers }, ...(DESIGN_BASELINE ? [{ impl: 'baseline' as Impl, workers: 1 }] : [])]
        : IMPLS;
    for (const { impl, workers } of impls) results.push(await runScenario(impl, workers, shape));
    if (shape.kind === 'design' && DESIGN_GATEWAY) results.push(await runScenario('ours', config.workers, shape, 'gateway'));
    if (shape.kind === 'design' && DESIGN_AUTOCANNON) results.push(await runScenario('ours', config.workers, { ...shape, generator: 'autocannon' }));
    // What a performance engineer's own open-loop tool sees, straight and through the gateway.
    if (shape.kind === 'design' && DESIGN_VEGETA) {
      results.push(await runScenario('ours', config.workers, { ...shape, generator: 'vegeta' }));
      if (DESIGN_GATEWAY) results.push(await runScenario('ours', config.workers, { ...shape, generator: 'vegeta' }, 'gateway'));
    }
  }

  const dir = new URL('../../bench/results/', import.meta.url);
  mkdirSync(dir, { recursive: true });
  const stamp = meta.date!.slice(0, 19).replace(/[:T]/g, '-');
  writeFileSync(new URL(`${stamp}.json`, dir), JSON.stringify({ meta, results }, null, 2) + '\n');
  const md = markdown(meta, results);
  writeFileSync(new URL(`${stamp}.md`, dir), md + '\n');
  writeFileSync(new URL('latest.md', dir), md + '\n');
  if (results.some((r) => r.kind === 'saturation')) {
    const svg = svgChart(results);
    writeFileSync(new URL(`${stamp}.svg`, dir), svg + '\n');
    writeFileSync(new URL('latest.svg', dir), svg + '\n');
  }
  console.log('\n' + md);
  console.log(`written: bench/results/${stamp}.{json,md${results.some((r) => r.kind === 'saturation') ? ',svg' : ''}} and latest.*`);
}

await main();
process.exit(0);
