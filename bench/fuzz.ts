// `make fuzz`: hostile bodies against a running worker. Sends FUZZ_BODIES (default 1,000,000)
// generated bodies to POST /track over keep-alive connections and checks that every answer is a JSON
// 2xx/4xx, that the worker never restarts, and that its memory stays bounded (an RSS curve is printed).
// Bodies: mutations of valid batches (byte flips, truncation, insertion), random bytes, invalid UTF-8,
// a BOM, deep nesting, huge and negative-zero numbers, __proto__ keys, wrong types, oversize bodies.
import { Agent, request } from 'node:http';
import { readFileSync } from 'node:fs';
import { BROKERS, createTopic, deleteTopic, uniqueTopic } from '../support/kafka.js';
import { freePort } from '../support/ports.js';
import { processTree } from './lib/procfs.js';
import { startTarget } from './lib/targets.js';

const TOTAL = Number(process.env.FUZZ_BODIES ?? 1_000_000);
const CONCURRENCY = 16;
const MAX_BODY_BYTES = 64 * 1024;

let seed = Number(process.env.FUZZ_SEED ?? 42);
/** xorshift32: reproducible with FUZZ_SEED. */
function rand(): number {
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) / 4294967296;
}
const int = (n: number) => Math.floor(rand() * n);
const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;

const valid = (n: number) =>
  JSON.stringify(Array.from({ length: n }, (_, i) => ({ container_id: `fuzz-${i % 7}`, lat: 51.9, lon: 4.4, timestamp: '2024-05-01T12:00:00Z', speed: i })));
const weird = ['1e400', '-0', '-1e-400', '9007199254740993', 'null', 'true', '"51.9"', '[]', '{}', 'NaN', '0x10', '.5', '1.', '-', '""'];

function body(i: number): Buffer {
  switch (i % 12) {
    case 0:
      return Buffer.from(valid(1 + int(20)));
    case 1: {
      const b = Buffer.from(valid(1 + int(10)));
      for (let k = 0; k < 1 + int(4); k++) b[int(b.length)] = int(256);
      return b;
    }
    case 2:
      return Buffer.from(valid(1 + int(10)).slice(0, int(200)));
    case 3: {
      const s = valid(2);
      const at = int(s.length);
      return Buffer.from(s.slice(0, at) + pick(['"', ',', ']', '}', '\\', '\u0000', '\ud800', '🚢']) + s.slice(at));
    }
    case 4:
      return Buffer.from(Array.from({ length: int(512) }, () => int(256)));
    case 5:
      return Buffer.from(`[{"container_id":"x","lat":${pick(weird)},"lon":${pick(weird)},"timestamp":"2024-05-01T12:00:00Z","speed":${pick(weird)}}]`);
    case 6: {
      const depth = 1 + int(20_000);
      return Buffer.from(pick(['[', '{"a":']).repeat(depth));
    }
    case 7:
      return Buffer.from(`[{"__proto__":{"lat":1},"constructor":{"prototype":{"x":1}},"container_id":"p","lat":1,"lon":2,"timestamp":"2024-05-01T12:00:00Z"}]`);
    case 8:
      return Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(valid(1))]);
    case 9:
      return Buffer.concat([
        Buffer.from('[{"container_id":"'),
        Buffer.from([0xc3, 0x28, 0xa0, 0xa1, 0xf0, 0x28, 0x8c, 0xbc]),
        Buffer.from('","lat":1,"lon":1,"timestamp":"2024-05-01T12:00:00Z"}]'),
      ]);
    case 10:
      return Buffer.alloc(MAX_BODY_BYTES + 1 + int(MAX_BODY_BYTES), 0x20);
    default:
      return Buffer.from(
        JSON.stringify(
          Array.from({ length: int(5) }, () => ({
            container_id: pick([1, null, '', 'x'.repeat(65), 'ok']),
            lat: pick([91, -0, 'x', null]),
            lon: 1,
            timestamp: pick(['2024-02-30T00:00:00Z', 'now', 5]),
          })),
        ),
      );
  }
}

function rssKb(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) : 0;
}

async function main() {
  const topic = await createTopic(uniqueTopic('fuzz'));
  const svc = await startTarget('ours', await freePort(), { MQ_BROKERS: BROKERS, MQ_TOPIC: topic, MAX_BODY_BYTES: String(MAX_BODY_BYTES), WORKERS: '1' });
  const worker = processTree(svc.proc.pid!).find((p) => p !== svc.proc.pid)!;
  const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const statuses = new Map<number, number>();
  let bad = 0;
  let errors = 0;
  let sent = 0;
  const curve: string[] = [];
  const t0 = Date.now();
  const one = (b: Buffer) =>
    new Promise<void>((resolve) => {
      const req = request(`${svc.url}/track`, { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': b.length } }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => (text += d));
        res.on('end', () => {
          statuses.set(res.statusCode!, (statuses.get(res.statusCode!) ?? 0) + 1);
          let json = true;
          try {
            JSON.parse(text);
          } catch {
            json = false;
          }
          if (![202, 400, 413, 415].includes(res.statusCode!) || !json) bad++;
          resolve();
        });
      });
      req.on('error', () => {
        errors++;
        resolve();
      });
      req.end(b);
    });
  const lane = async () => {
    while (sent < TOTAL) {
      const i = sent++;
      await one(body(i));
      if (i % 50_000 === 0) {
        const line = `${String(i).padStart(8)} bodies  ${String(Math.round((Date.now() - t0) / 1000)).padStart(4)} s  worker RSS ${Math.round(rssKb(worker) / 1024)} MiB`;
        curve.push(line);
        process.stderr.write(line + '\n');
      }
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, lane));
  agent.destroy();
  const workerNow = processTree(svc.proc.pid!).find((p) => p !== svc.proc.pid);
  const metrics = await (await fetch(`${svc.url}/metrics`)).text();
  const restarts = /^ingest_worker_restarts_total (\d+)/m.exec(metrics)?.[1];
  curve.push(
    `${String(TOTAL).padStart(8)} bodies  ${String(Math.round((Date.now() - t0) / 1000)).padStart(4)} s  worker RSS ${Math.round(rssKb(worker) / 1024)} MiB`,
  );
  const code = await svc.stop();
  await deleteTopic(topic);
  console.log(`\nfuzz: ${TOTAL} bodies (seed ${process.env.FUZZ_SEED ?? 42}) in ${Math.round((Date.now() - t0) / 1000)} s`);
  console.log(
    `statuses: ${[...statuses]
      .sort()
      .map(([s, n]) => `${s}×${n}`)
      .join(' ')}`,
  );
  console.log(`answers that were not a JSON 202/400/413/415: ${bad}; connection errors: ${errors}`);
  console.log(`worker pid ${worker} → ${workerNow} (same: ${worker === workerNow}); ingest_worker_restarts_total ${restarts}; service exit ${code}`);
  console.log('RSS curve:\n' + curve.join('\n'));
  process.exit(bad === 0 && errors === 0 && worker === workerNow && restarts === '0' && code === 0 ? 0 : 1);
}

await main();
