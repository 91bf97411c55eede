// From HTTP to the topic and back: what a consumer of container.telemetry sees.
import { execFile } from 'node:child_process';
import { Agent, request } from 'node:http';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BROKERS, consumeAll, type ConsumedMessage } from '../../support/kafka.js';
import { javaPartition } from '../helpers/murmur2.js';
import { point, postTrack, startService, type Service } from '../helpers/service.js';
import { fileTopic } from '../helpers/topic.js';

const PARTITIONS = 6;
const topic = fileTopic('e2e', PARTITIONS);
let svc: Service;
let messages: ConsumedMessage[];

// The value the README's "The Kafka messages" promises: the five fields, speed filled with 0, timestamp as sent.
const normalized = (p: Record<string, unknown>) =>
  JSON.stringify({ container_id: p.container_id, lat: p.lat, lon: p.lon, timestamp: p.timestamp, speed: p.speed ?? 0 });

const containers = ['MSCU1234567', 'TGHU7654321', 'конт-9', '集装箱-7', 'a"quoted\\id'];
const timestamps = ['2024-05-01T12:00:00Z', '2024-05-01t12:00:00.123456789+05:30', '1990-12-31T23:59:60Z', '2024-02-29T23:59:59-23:59'];
// One request of 40 points, 8 per container, in a known order (lat carries the sequence).
const first = Array.from({ length: 40 }, (_, i) => ({
  container_id: containers[i % containers.length]!,
  lat: Math.floor(i / containers.length) / 10,
  lon: -180 + i,
  timestamp: timestamps[i % timestamps.length]!,
  ...(i % 3 === 0 ? {} : { speed: i * 1.5 }),
  ignored_field: 'dropped',
}));
const KEEPALIVE_REQUESTS = 10;
const PER_REQUEST = 3;
let acceptedFrom = 0;
let acceptedTo = 0;

beforeAll(async () => {
  svc = await startService({ MQ_TOPIC: topic });
  acceptedFrom = Date.now();
  expect((await postTrack(svc.url, first)).status).toBe(202);

  // A mixed batch: refused as a whole, so none of it may appear in Kafka.
  const mixed = await postTrack(svc.url, [point('rejected-1'), point('rejected-2', { lat: 123 }), point('rejected-3')]);
  expect(mixed.status).toBe(400);

  // Requests one after another on one keep-alive connection: order must hold across them.
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  for (let r = 0; r < KEEPALIVE_REQUESTS; r++) {
    const body = JSON.stringify(Array.from({ length: PER_REQUEST }, (_, i) => point('keepalive-1', { speed: r * PER_REQUEST + i })));
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(`${svc.url}/track`, { method: 'POST', agent, headers: { 'content-type': 'application/json' } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
      });
      req.on('error', reject);
      req.end(body);
    });
    expect(status).toBe(202);
  }
  agent.destroy();
  acceptedTo = Date.now();
  messages = await consumeAll(topic, { expected: first.length + KEEPALIVE_REQUESTS * PER_REQUEST, partitions: PARTITIONS });
});

afterAll(async () => {
  expect(await svc?.stop()).toBe(0);
});

describe('messages in Kafka', () => {
  it('has exactly one message per accepted point and nothing from the rejected batch', () => {
    expect(messages).toHaveLength(first.length + KEEPALIVE_REQUESTS * PER_REQUEST);
    expect(messages.filter((m) => m.key.startsWith('rejected-'))).toEqual([]);
  });

  it('keys each message by container_id and carries the normalized value', () => {
    const expected = first.map(normalized).sort();
    const got = messages.filter((m) => m.key !== 'keepalive-1');
    for (const m of got) expect(JSON.parse(m.value).container_id).toBe(m.key);
    expect(got.map((m) => m.value).sort()).toEqual(expected);
  });

  it('puts every container on one partition, the one the Java client would choose (murmur2)', () => {
    const partitionsByKey = new Map<string, Set<number>>();
    for (const m of messages) {
      if (!partitionsByKey.has(m.key)) partitionsByKey.set(m.key, new Set());
      partitionsByKey.get(m.key)!.add(m.partition);
    }
    for (const [key, parts] of partitionsByKey) {
      expect([...parts], key).toEqual([javaPartition(key, PARTITIONS)]);
    }
  });

  it('keeps the order of one container within a request', () => {
    for (const id of containers) {
      const seq = messages
        .filter((m) => m.key === id)
        .sort((a, b) => a.offset - b.offset)
        .map((m) => JSON.parse(m.value).lat as number);
      expect(seq, id).toEqual([0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]);
    }
  });

  it('keeps the order across requests sent one after another on one keep-alive connection', () => {
    const seq = messages
      .filter((m) => m.key === 'keepalive-1')
      .sort((a, b) => a.offset - b.offset)
      .map((m) => JSON.parse(m.value).speed as number);
    expect(seq).toEqual(Array.from({ length: KEEPALIVE_REQUESTS * PER_REQUEST }, (_, i) => i));
  });

  it('stamps each message with the time the service accepted it, not the device clock', () => {
    for (const m of messages) {
      expect(m.timestamp).toBeGreaterThanOrEqual(acceptedFrom - 5);
      expect(m.timestamp).toBeLessThanOrEqual(acceptedTo + 5);
    }
  });
});

// Topic-level librdkafka properties (partitioner, acks, message.timeout.ms...) given on the global
// configuration were dropped: the binding replaces the default topic configuration. Each property
// now goes where librdkafka reads it (src/kafka/settings.ts); a partitioner is one whose effect shows.
describe('a topic-level librdkafka property given through MQ_OPT_*', () => {
  const randomTopic = fileTopic('e2e-random', PARTITIONS);

  it('takes effect: MQ_OPT_PARTITIONER=random spreads one container over the partitions', async () => {
    const random = await startService({ MQ_TOPIC: randomTopic, MQ_OPT_PARTITIONER: 'random' });
    try {
      for (let i = 0; i < 30; i++) expect((await postTrack(random.url, [point('one-container', { speed: i })])).status).toBe(202);
    } finally {
      expect(await random.stop()).toBe(0);
    }
    const spread = await consumeAll(randomTopic, { expected: 30, partitions: PARTITIONS });
    expect(spread).toHaveLength(30);
    // murmur2_random (the default) puts one key on one partition; random, 30 times over 6, on several
    // (all on one: a chance of 6 in 6^30).
    expect(new Set(spread.map((m) => m.partition)).size).toBeGreaterThan(1);
  });
});

// librdkafka compresses with what it was built with: zstd needs libzstd at build time (scripts/install.sh).
// Read back by Kafka's own console consumer (Java), a reader that no one here wrote.
describe('MQ_OPT_COMPRESSION_TYPE', () => {
  const compressedTopic = fileTopic('e2e-compressed', PARTITIONS);

  it("zstd and lz4: Kafka's console consumer reads back every point, key and value", async () => {
    const sent: string[] = [];
    for (const codec of ['zstd', 'lz4']) {
      const svc = await startService({ MQ_TOPIC: compressedTopic, MQ_OPT_COMPRESSION_TYPE: codec });
      try {
        const points = Array.from({ length: 20 }, (_, i) => point(`${codec}-${i % 4}`, { speed: i }));
        expect((await postTrack(svc.url, points)).status).toBe(202);
        sent.push(...points.map((p) => `${p.container_id}\t${normalized(p)}`));
      } finally {
        expect(await svc.stop()).toBe(0);
      }
    }
    const { stdout } = await promisify(execFile)(fileURLToPath(new URL('../../scripts/kafka.sh', import.meta.url)), ['consume', compressedTopic], {
      env: { ...process.env, KAFKA_BOOTSTRAP: BROKERS, KAFKA_CONSUME_MAX: String(sent.length), KAFKA_CONSUME_TIMEOUT_MS: '20000' },
    });
    // Each line: CreateTime:<ms>, Partition:<n>, key, value (tab-separated).
    const read = stdout
      .split('\n')
      .filter((line) => line.startsWith('CreateTime:'))
      .map((line) => line.split('\t').slice(2).join('\t'));
    expect(read.sort()).toEqual(sent.sort());
  });
});
