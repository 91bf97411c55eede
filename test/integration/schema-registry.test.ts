// MQ_VALUE_FORMAT avro, protobuf and json-schema against a real Schema Registry (Apicurio, started
// here by scripts/registry.sh) and a real broker: what the service writes is read back by Confluent's
// own deserializers (@confluentinc/schemaregistry), an incompatible schema stops the start, an
// unreachable registry keeps the service unready until it answers, and a replay after kill -9
// produces the bytes of the first produce.
import { execFile } from 'node:child_process';
import { createConnection, createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeAll, createTopic, deleteTopic, uniqueTopic, type ConsumedMessage } from '../../support/kafka.js';
import { freePort } from '../../support/ports.js';
import { registryDecoder } from '../../scripts/registry-decode.js';
import { REPO_ROOT } from '../../support/repo-root.js';
import { journalDir, point, postTrack, startService, until, untilJournalEmpty } from '../helpers/service.js';

const run = promisify(execFile);
const REGISTRY = join(REPO_ROOT, 'scripts/registry.sh');
type Format = 'avro' | 'protobuf' | 'json-schema';

let registryEnv: NodeJS.ProcessEnv;
let registryUrl: string;

async function registry(command: 'start' | 'stop'): Promise<void> {
  await run(REGISTRY, [command], { env: registryEnv, timeout: 180_000 });
}

/** Each message's value, decoded by Confluent's deserializer of the format. */
async function decodeAll(format: Format, topic: string, messages: readonly ConsumedMessage[]): Promise<Record<string, unknown>[]> {
  const decode = registryDecoder(format, registryUrl);
  const out: Record<string, unknown>[] = [];
  // The five fields alone.
  for (const m of messages) out.push(expected(await decode(topic, m.bytes)));
  return out;
}

/** The five fields as the service writes them: speed's default filled in. */
const expected = (p: Record<string, unknown>) => ({
  container_id: p.container_id,
  lat: p.lat,
  lon: p.lon,
  timestamp: p.timestamp,
  speed: p.speed ?? 0,
});

/** Points of every shape the decoder takes: as JSON.stringify writes them, fields reordered, speed absent, non-ASCII, 17 digits, an escape, gzip. */
function requestsOf(prefix: string): { body: Buffer; gzip: boolean; points: Record<string, unknown>[] }[] {
  const asWritten = Array.from({ length: 20 }, (_, i) => point(`${prefix}-${i}`, { lat: 51.9 + i / 1e6, lon: -4.4 - i / 1e5, speed: i / 4 }));
  const reordered = [{ timestamp: '2024-05-01T12:00:00.5+02:00', speed: 0, lon: 180, lat: -90, container_id: `${prefix}-r` }];
  const noSpeed = [point(`${prefix}-nospeed`)];
  const unusual = [point(`${prefix}-é`, { lat: 0.1 + 0.2, lon: -1e-7, speed: 1e21 }), point(`${prefix}-"q"`, { lat: -0 })];
  // The points as the service reads them from the body (JSON.stringify writes -0 as 0).
  const sent = (points: Record<string, unknown>[]) => JSON.parse(JSON.stringify(points)) as Record<string, unknown>[];
  const texts = [asWritten, reordered, noSpeed, unusual];
  return [
    ...texts.map((points) => ({ body: Buffer.from(JSON.stringify(points)), gzip: false, points: sent(points) })),
    { body: gzipSync(JSON.stringify(noSpeed)), gzip: true, points: sent(noSpeed) },
  ];
}

describe('Schema Registry value formats', () => {
  beforeAll(async () => {
    const port = await freePort();
    // Its pid file where CI looks for a registry left running (.ci/run).
    const dir = join(REPO_ROOT, '.run/registry-test');
    registryEnv = { ...process.env, REGISTRY_PORT: String(port), REGISTRY_MANAGEMENT_PORT: String(await freePort()), REGISTRY_RUN: dir };
    registryUrl = `http://127.0.0.1:${port}/apis/ccompat/v7`;
    await registry('start');
  }, 200_000);

  afterAll(async () => {
    await registry('stop');
  });

  // The three at once: each on a topic and a service of its own, each asserting with its own `expect`
  // (a concurrent test's failure is then its own, not a neighbour's).
  it.concurrent.for(['avro', 'protobuf', 'json-schema'] as const)(
    '%s: every accepted point is read back by Confluent’s deserializer with its five fields, the key and the schema id as registered',
    { timeout: 90_000 },
    async (format, { expect }) => {
      const topic = await createTopic(uniqueTopic(`registry-${format}`), 3);
      // The record strategy for one format: its subject is the record's full name.
      const strategy = format === 'protobuf' ? 'record' : 'topic';
      const svc = await startService({ MQ_TOPIC: topic, MQ_VALUE_FORMAT: format, SCHEMA_REGISTRY_URL: registryUrl, SCHEMA_SUBJECT_STRATEGY: strategy });
      try {
        const sent: Record<string, unknown>[] = [];
        for (const r of requestsOf(`SR-${format}`)) {
          const res = await postTrack(svc.url, r.body, r.gzip ? { 'content-encoding': 'gzip' } : {});
          expect(res.status, JSON.stringify(res.json)).toBe(202);
          sent.push(...r.points);
        }
        const messages = await consumeAll(topic, { expected: sent.length, partitions: 3 });
        expect(messages).toHaveLength(sent.length);
        const subject = strategy === 'record' ? 'telemetry.TrackPoint' : `${topic}-value`;
        const latest = (await (await fetch(`${registryUrl}/subjects/${subject}/versions/latest`)).json()) as { id: number };
        for (const m of messages) expect(m.bytes.readUInt32BE(1)).toBe(latest.id);
        const decoded = await decodeAll(format, topic, messages);
        const byKey = (a: Record<string, unknown>, b: Record<string, unknown>) => String(a.container_id).localeCompare(String(b.container_id));
        expect(decoded.sort(byKey)).toEqual(sent.map(expected).sort(byKey));
        expect(messages.map((m) => m.key).sort()).toEqual(sent.map((p) => String(p.container_id)).sort());
      } finally {
        await svc.stop();
        await deleteTopic(topic);
      }
    },
  );

  it('a registry that refuses the schema as incompatible stops the start with exit 2, naming the subject and the level', { timeout: 60_000 }, async () => {
    const topic = uniqueTopic('registry-incompatible');
    // An earlier version holding the id alone: BACKWARD refuses a new version that adds required fields.
    const earlier = { type: 'record', name: 'TrackPoint', namespace: 'telemetry', fields: [{ name: 'container_id', type: 'string' }] };
    const res = await fetch(`${registryUrl}/subjects/${topic}-value/versions`, {
      method: 'POST',
      headers: { 'content-type': 'application/vnd.schemaregistry.v1+json' },
      body: JSON.stringify({ schema: JSON.stringify(earlier) }),
    });
    expect(res.status).toBe(200);
    const svc = await startService({ MQ_TOPIC: topic, MQ_VALUE_FORMAT: 'avro', SCHEMA_REGISTRY_URL: registryUrl }, { waitFor: 'nothing' });
    expect(await svc.exited).toBe(2);
    const said = svc.output.join('\n');
    expect(said).toContain(`subject ${topic}-value`);
    expect(said).toContain('compatibility BACKWARD');
    expect(said).toContain('Make the change compatible');
  });

  it(
    'with the registry unreachable at start: /readyz 503 naming it and POST /track refused until it answers, then points taken',
    { timeout: 90_000 },
    async () => {
      const topic = await createTopic(uniqueTopic('registry-late'), 3);
      // The registry as this service sees it: nothing listens on the port until the proxy to it starts.
      const port = await freePort();
      const lateUrl = registryUrl.replace(/:\d+\//, `:${port}/`);
      const svc = await startService({ MQ_TOPIC: topic, MQ_VALUE_FORMAT: 'avro', SCHEMA_REGISTRY_URL: lateUrl }, { waitFor: 'healthy' });
      let proxy: Server | null = null;
      try {
        await new Promise((r) => setTimeout(r, 1_000));
        const ready = await fetch(`${svc.url}/readyz`);
        expect(ready.status).toBe(503);
        expect(await ready.text()).toContain(lateUrl);
        const refused = await postTrack(svc.url, [point('SR-late-refused')]);
        expect(refused.status).toBe(500);
        expect(refused.json.error).toBe('schema_unknown');

        proxy = await tcpProxy(port, Number(new URL(registryUrl).port));
        await until('the service ready once the registry answers', async () => (await fetch(`${svc.url}/readyz`)).status === 200, 30_000);
        const taken = await postTrack(svc.url, [point('SR-late-taken')]);
        expect(taken.status).toBe(202);
        const messages = await consumeAll(topic, { expected: 1, partitions: 3 });
        expect(await decodeAll('avro', topic, messages)).toEqual([expected(point('SR-late-taken'))]);
      } finally {
        await svc.stop();
        proxy?.close();
        await deleteTopic(topic);
      }
    },
  );

  it(
    'kill -9 under load three times, each process started on the journal the last one left: the replay produces the same bytes as the first produce, nothing accepted lost',
    { timeout: 120_000 },
    async () => {
      const topic = await createTopic(uniqueTopic('registry-replay'), 3);
      const journal = journalDir();
      const env = { MQ_TOPIC: topic, MQ_VALUE_FORMAT: 'avro', SCHEMA_REGISTRY_URL: registryUrl, JOURNAL_DIR: journal };
      const accepted: Record<string, unknown>[] = [];
      let seq = 0;
      // Three kills, each process started on the journal the previous one left: a point is produced twice
      // only when a kill falls between Kafka's write and the journal's mark, which a single kill can miss
      // (bench/HISTORY.md, 2026-12-07, third session).
      for (let kill = 0; kill < 3; kill++) {
        const svc = await startService(env, { ownProcessGroup: true });
        // Eight connections, each sending requests of ten points with ids of their own, until the kill.
        let killed = false;
        const loops = Array.from({ length: 8 }, async () => {
          while (!killed) {
            const points = Array.from({ length: 10 }, () => point(`SR-replay-${seq++}`, { lat: (seq % 180) - 89.5, speed: seq / 8 }));
            const res = await postTrack(svc.url, points).catch(() => null);
            if (res?.status === 202) accepted.push(...points);
          }
        });
        await new Promise((r) => setTimeout(r, 1_000));
        process.kill(-svc.proc.pid!, 'SIGKILL');
        killed = true;
        await Promise.all(loops);
        await svc.exited;
      }

      const replay = await startService(env);
      try {
        expect(replay.output.join('\n')).toMatch(/the journal holds points an earlier process did not see acknowledged/);
        await untilJournalEmpty(replay, 'the journal produced again');
        const messages = await consumeAll(topic, { expected: accepted.length, partitions: 3, toEnd: true });
        const byKey = new Map<string, Buffer[]>();
        for (const m of messages) byKey.set(m.key, [...(byKey.get(m.key) ?? []), m.bytes]);
        const copies = [...byKey.values()].filter((values) => values.length > 1);
        console.log(
          `registry replay: ${accepted.length} points accepted, ${messages.length} messages, ${copies.length} points produced twice (first produce and replay)`,
        );
        // Every accepted point is there; a point produced twice has the same bytes both times.
        for (const p of accepted) expect(byKey.has(String(p.container_id)), String(p.container_id)).toBe(true);
        for (const values of copies) for (const v of values) expect(v.equals(values[0]!)).toBe(true);
        expect(copies.length).toBeGreaterThan(0);
        const decoded = await decodeAll(
          'avro',
          topic,
          [...byKey.values()].map((values) => ({ bytes: values[0]! }) as ConsumedMessage),
        );
        const sent = new Map(accepted.map((p) => [String(p.container_id), expected(p)]));
        for (const d of decoded) expect(d).toEqual(sent.get(String(d.container_id)) ?? d);
      } finally {
        await replay.stop();
        await deleteTopic(topic);
      }
    },
  );
});

/** A TCP proxy from 127.0.0.1:port to 127.0.0.1:target. */
function tcpProxy(port: number, target: number): Promise<Server> {
  const server = createServer((client) => {
    const upstream = createConnection(target, '127.0.0.1');
    client.pipe(upstream).pipe(client);
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
  });
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve(server)));
}
