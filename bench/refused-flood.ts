// make bench-refused: the design load of valid requests with and without a flood of invalid ones
// beside it, the refused-requests topic on (MQ_REFUSED_TOPIC, its rate at the default): what a bad
// firmware release costs the devices that send good points. Issue 47's bound: the valid requests' p99
// within 1 ms of the same load without the flood.
//
// Each round runs, for each shape of the design load (bench/lib/design-load.ts), three cases in turn
// (each round starting with the next case), each on a fresh service (WORKERS=2) and points topic:
//   no flood            the design load alone, the topic on
//   flood, topic on     the same, and FLOOD_RATE invalid requests a second (a latitude of 95: parsed,
//                       validated and refused 400, the costliest common refusal) on FLOOD_CONNECTIONS
//   flood, topic off    the same flood without the topic: what refusing them costs by itself
//   bare, no flood / bare, flood   the same loads against 2 bare uWebSockets.js processes that answer
//                       every request 202 at once (bench/lib/bare-http.ts): what 15,000 requests a
//                       second and their generators do to a server that does nothing
//   flood elsewhere     the design load against the service, the flood against a bare uWebSockets.js
//                       process beside it: what the flood costs the service's valid requests when the
//                       service refuses none of it (its generator's CPU and the answers', on the cores
//                       the service, its broker and the design load's generator share): the floor of
//                       the bound on this machine, which no refusal however cheap goes under
// Both loads are paced (bench/lib/paced-load.ts), each in a worker thread of this process, and both
// warm up for FLOOD_WARMUP_SECONDS before the measurement: the bound is the flood's steady state.
// FLOOD_WARM=0 starts the flood with the measurement instead, the first seconds of a flood on a
// service that never refused a body (track-body-warm-up.ts is about them). Every valid point answered
// 202 is looked for in Kafka.
//
//   FLOOD_RATE 5000   FLOOD_CONNECTIONS 20   FLOOD_SECONDS 10   FLOOD_ROUNDS 3   FLOOD_WARMUP_SECONDS 3   FLOOD_WARM 1
//   FLOOD_CASES 1,2,3,4,5,6 (the cases above, by number)   FLOOD_SHAPES 100×100,10000×1   FLOOD_BODY (the flood's body)
import { release } from 'node:os';
import { BROKERS, createTopic, deleteTopic } from '../support/kafka.js';
import { freePort } from '../support/ports.js';
import { topicSize, waitForDelivery } from './lib/delivery.js';
import { DESIGN_LOAD } from './lib/design-load.js';
import { envNumber } from './lib/env.js';
import { pacedLoad, type PacedResult } from './lib/paced-load.js';
import { benchPoints } from './lib/points.js';
import { cpuModel } from './lib/procfs.js';
import { seriesValue } from './lib/prom-text.js';
import { startBareHttp, startTarget } from './lib/targets.js';
import { median, roundOrder } from './lib/rounds.js';

const FLOOD_RATE = envNumber('FLOOD_RATE', 5000);
const FLOOD_CONNECTIONS = envNumber('FLOOD_CONNECTIONS', 20);
const SECONDS = envNumber('FLOOD_SECONDS', 10);
const ROUNDS = envNumber('FLOOD_ROUNDS', 3);
const WARMUP_SECONDS = envNumber('FLOOD_WARMUP_SECONDS', 3);
/** FLOOD_WARM=0: the flood starts with the measurement, on a refusal path not yet compiled (its onset). */
const WARM_FLOOD = process.env.FLOOD_WARM !== '0';
const REFUSED_TOPIC = 'bench.refused.flood';
const ALL_CASES = ['no flood', 'flood, topic on', 'flood, topic off', 'bare, no flood', 'bare, flood', 'flood elsewhere'] as const;
type Case = (typeof ALL_CASES)[number];
/** FLOOD_BODY: another body for the flood (`[]`: requests that cost the service as little as one can). */
const INVALID = process.env.FLOOD_BODY ?? JSON.stringify([{ container_id: 'MSKU-flood', lat: 95, lon: 4.4, timestamp: '2024-05-01T12:00:00Z' }]);
/** FLOOD_CASES: the cases to run, by their number (1-6, in the order above). */
const CHOSEN = (process.env.FLOOD_CASES ?? '1,2,3,4,5,6').split(',').map(Number);
/** FLOOD_SHAPES: the design shapes to run (default both). */
const SHAPES = (process.env.FLOOD_SHAPES ?? Object.keys(DESIGN_LOAD).join(',')).split(',') as (keyof typeof DESIGN_LOAD)[];

interface Row {
  shape: string;
  case: Case;
  round: number;
  valid: PacedResult;
  flood: PacedResult | null;
  written: number;
  overRate: number;
  /** Valid requests found in Kafka; null for a bare server. */
  delivered: number | null;
}

/**
 * Both loads for SECONDS, after the valid one's warm-up (then `warmedUp`): the valid one against
 * `url`, the flood against `floodUrl` (null: no flood).
 */
async function load(
  url: string,
  body: string,
  shape: (typeof DESIGN_LOAD)[keyof typeof DESIGN_LOAD],
  floodUrl: string | null,
  warmedUp = async () => undefined,
): Promise<[PacedResult, PacedResult | null]> {
  const valid = { url, path: '/track', body, connections: shape.connections, rate: shape.rate };
  const flood = (seconds: number) =>
    floodUrl === null
      ? Promise.resolve(null)
      : pacedLoad({ url: floodUrl, path: '/track', body: INVALID, connections: FLOOD_CONNECTIONS, rate: FLOOD_RATE, seconds });
  await Promise.all([pacedLoad({ ...valid, seconds: WARMUP_SECONDS }), WARM_FLOOD ? flood(WARMUP_SECONDS) : null]);
  await warmedUp();
  return Promise.all([pacedLoad({ ...valid, seconds: SECONDS }), flood(SECONDS)]);
}

async function measureBare(shapeName: keyof typeof DESIGN_LOAD, which: Case, round: number): Promise<Row> {
  const shape = DESIGN_LOAD[shapeName];
  const port = await freePort();
  const servers = await startBareHttp(port, 2, 0);
  try {
    const url = `http://127.0.0.1:${port}`;
    const [valid, flood] = await load(url, JSON.stringify(benchPoints(shape.points, 'bare')), shape, which === 'bare, flood' ? url : null);
    return { shape: shapeName, case: which, round, valid, flood, written: 0, overRate: 0, delivered: null };
  } finally {
    for (const server of servers) server.kill();
  }
}

async function measure(shapeName: keyof typeof DESIGN_LOAD, which: Case, round: number): Promise<Row> {
  if (which.startsWith('bare')) return measureBare(shapeName, which, round);
  const shape = DESIGN_LOAD[shapeName];
  const id = `flood${Date.now().toString(36)}`;
  const topic = await createTopic(`bench.${id}`);
  const env: Record<string, string> = {
    MQ_BROKERS: BROKERS,
    MQ_TOPIC: topic,
    WORKERS: '2',
    ...(which === 'flood, topic off' ? {} : { MQ_REFUSED_TOPIC: REFUSED_TOPIC }),
  };
  const target = await startTarget('ours', await freePort(), env);
  // flood elsewhere: a bare uWebSockets.js process takes the flood (one: the service's 2 workers take the valid load).
  const elsewhere = which === 'flood elsewhere' ? await freePort() : null;
  const floodServers = elsewhere === null ? [] : await startBareHttp(elsewhere, 1, 0);
  try {
    let before = 0;
    const floodUrl = which === 'no flood' ? null : elsewhere === null ? target.url : `http://127.0.0.1:${elsewhere}`;
    const [valid, flood] = await load(target.url, JSON.stringify(benchPoints(shape.points, id)), shape, floodUrl, async () => {
      before = await topicSize(topic);
    });
    await waitForDelivery(topic, before + valid.ok2xx * shape.points);
    const delivered = ((await topicSize(topic)) - before) / shape.points;
    const metrics = await (await fetch(`${target.url}/metrics`)).text();
    return {
      shape: shapeName,
      case: which,
      round,
      valid,
      flood,
      written: seriesValue(metrics, 'ingest_refused_requests_written_total') ?? 0,
      overRate: seriesValue(metrics, 'ingest_refused_requests_dropped_total{reason="over_rate"}') ?? 0,
      delivered,
    };
  } finally {
    for (const server of floodServers) server.kill();
    await target.stop();
    await deleteTopic(topic);
  }
}

const CASES = ALL_CASES.filter((_, i) => CHOSEN.includes(i + 1));

await createTopic(REFUSED_TOPIC).catch(() => undefined); // there already: fine
console.log(
  `${cpuModel()}, Linux ${release()}, Node ${process.version}; design load paced, ${SECONDS} s per row after ${WARMUP_SECONDS} s of warm-up, WORKERS=2; flood: ${FLOOD_RATE} invalid requests/s on ${FLOOD_CONNECTIONS} connections; ${ROUNDS} rounds`,
);
console.log(
  '| shape | case | round | valid p50 ms | valid p99 ms | valid non-2xx | valid requests delivered / accepted | flood requests | flood answers | refused written / over the rate |',
);
console.log('|---|---|---|---|---|---|---|---|---|---|');
const rows: Row[] = [];
for (let round = 1; round <= ROUNDS; round++) {
  for (const shape of SHAPES) {
    for (const which of roundOrder(CASES, round)) {
      const r = await measure(shape, which, round);
      rows.push(r);
      const f = r.flood;
      const bare = r.delivered === null;
      console.log(
        `| ${r.shape} | ${r.case} | ${round} | ${r.valid.latencyMs.p50.toFixed(2)} | ${r.valid.latencyMs.p99.toFixed(2)} | ${r.valid.non2xx + r.valid.errors} | ${bare ? '-' : `${r.delivered} / ${r.valid.ok2xx}`} | ${f === null ? '-' : f.requests} | ${f === null ? '-' : `non-2xx ×${f.non2xx}, 2xx ×${f.ok2xx}, errors ${f.errors}`} | ${bare ? '-' : `${r.written} / ${r.overRate}`} |`,
      );
    }
  }
}
console.log('\nmedian valid p99 over the rounds, ms (flood − no flood):');
for (const shape of SHAPES) {
  const p99 = (which: Case) => {
    const xs = rows.filter((r) => r.shape === shape && r.case === which).map((r) => r.valid.latencyMs.p99);
    return xs.length === 0 ? NaN : median(xs);
  };
  const [none, on, off, bareNone, bareFlood, elsewhere] = ALL_CASES.map(p99) as [number, number, number, number, number, number];
  const delta = (a: number, b: number) => `${a.toFixed(2)} (${a - b >= 0 ? '+' : ''}${(a - b).toFixed(2)})`;
  console.log(
    `  ${shape}: no flood ${none.toFixed(2)}, flood with the topic ${delta(on, none)}, flood without it ${delta(off, none)}, flood sent to a bare server beside the service ${delta(elsewhere, none)}; bare servers: no flood ${bareNone.toFixed(2)}, flood ${delta(bareFlood, bareNone)}`,
  );
}
const lost = rows.filter((r) => r.delivered !== null && r.delivered < r.valid.ok2xx);
if (lost.length > 0) {
  console.log(`valid points answered 202 and not found in Kafka in ${lost.length} rows`);
  process.exitCode = 1;
}
