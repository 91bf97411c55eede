// The refused-requests topic (MQ_REFUSED_TOPIC) against a real service and broker: every refusal for a
// request's content lands there once, with its headers, its body decompressed and cut; the answers
// are the same with the topic and without it; a flood is bounded by MQ_REFUSED_RATE; and the topic
// gone never touches a valid request.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeAll, createTopic, deleteTopic, uniqueTopic, type ConsumedMessage } from '../../support/kafka.js';
import { parseAnswer, raw } from '../helpers/raw-http.js';
import { point, startService, until, type Service } from '../helpers/service.js';

const run = promisify(execFile);
const REFUSED_TABLE = fileURLToPath(new URL('../../dist/scripts/refused.js', import.meta.url));
const LIMITS = { MAX_BODY_BYTES: '4096', MAX_POINTS: '10', WORKERS: '1' };
const json = (v: unknown) => Buffer.from(JSON.stringify(v));

/** One request, sent the same way to any service: its answer's status and body. */
interface Sent {
  name: string;
  body: Buffer;
  headers?: Record<string, string>;
}

async function send(url: string, r: Sent): Promise<{ status: number; body: string }> {
  const res = await fetch(`${url}/track`, { method: 'POST', headers: { 'content-type': 'application/json', ...r.headers }, body: r.body });
  return { status: res.status, body: await res.text() };
}

async function metric(url: string, series: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.split(' ')[1]);
}

describe('requests refused for their content, kept on MQ_REFUSED_TOPIC', () => {
  let withTopic: Service;
  let without: Service;
  let refusedTopic: string;
  let pointsTopic: string;

  beforeAll(async () => {
    refusedTopic = await createTopic(uniqueTopic('refused'), 3);
    pointsTopic = await createTopic(uniqueTopic('points'), 3);
    [withTopic, without] = await Promise.all([
      startService({ ...LIMITS, MQ_TOPIC: pointsTopic, MQ_REFUSED_TOPIC: refusedTopic, MQ_REFUSED_MAX_BYTES: '1024', TRUST_GATEWAY_HEADERS: '1' }),
      startService({ ...LIMITS, MQ_TOPIC: pointsTopic }),
    ]);
  }, 60_000);

  afterAll(async () => {
    await Promise.all([withTopic?.stop(), without?.stop()]);
    await deleteTopic(refusedTopic);
    await deleteTopic(pointsTopic);
  });

  it('writes each refusal once, with the answer, the client, the sizes and the body as received (gzip inflated, long bodies cut); answers the same as without the topic', async () => {
    const invalid = json([point('MSKU-bad', { lat: 95 }), point('MSKU-2')]);
    const long = json(Array.from({ length: 9 }, (_, i) => point(`MSKU-long-${i}`, { lat: 95, note: 'x'.repeat(300) })));
    const bomb = gzipSync(Buffer.from(`[${' '.repeat(10_000)}]`));
    const requests: Sent[] = [
      { name: 'validation_failed', body: invalid, headers: { 'x-forwarded-for': '203.0.113.5, 198.51.100.20', 'x-api-key-name': 'fleet-a' } },
      { name: 'invalid_json', body: Buffer.from('[{"container_id":"MSKU-json","lat":') },
      { name: 'invalid_json, gzip', body: gzipSync('[{"container_id":"MSKU-gz"},'), headers: { 'content-encoding': 'gzip' } },
      { name: 'not gzip', body: Buffer.from('plain text said to be gzip'), headers: { 'content-encoding': 'gzip' } },
      { name: 'payload_too_large, points', body: json(Array.from({ length: 11 }, (_, i) => point(`MSKU-many-${i}`))) },
      { name: 'payload_too_large, gzip bomb', body: bomb, headers: { 'content-encoding': 'gzip' } },
      { name: 'payload_too_large, Content-Length', body: Buffer.alloc(5000, 'a') },
      { name: 'unsupported_media_type', body: Buffer.from('a,b'), headers: { 'content-type': 'text/csv' } },
      { name: 'validation_failed, cut', body: long },
      { name: 'valid', body: json([point('MSKU-ok')]) },
    ];
    for (const r of requests) {
      const [a, b] = await Promise.all([send(withTopic.url, r), send(without.url, r)]);
      expect(a, r.name).toEqual(b);
    }
    // A body that grows past MAX_BODY_BYTES while being read (chunked: no Content-Length to refuse it by).
    const chunk = Buffer.from(`[${JSON.stringify(point('MSKU-chunked'))}${' '.repeat(3000)}`);
    const chunked = (s: import('node:net').Socket) => {
      s.write('POST /track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n');
      for (let i = 0; i < 2; i++) s.write(`${chunk.byteLength.toString(16)}\r\n${chunk.toString()}\r\n`);
    };
    const [c1, c2] = await Promise.all([raw(withTopic.port, chunked), raw(without.port, chunked)]);
    expect(parseAnswer(c1.text).status).toBe(413);
    expect(parseAnswer(c1.text).body).toEqual(parseAnswer(c2.text).body);

    const got = await consumeAll(refusedTopic, { expected: 10, partitions: 3, idleMs: 1500 });
    const byCode = (code: string): ConsumedMessage[] => got.filter((m) => m.headers['refused.code'] === code);
    expect(got).toHaveLength(10); // 9 refused + 1 chunked; the valid request is not there
    expect(got.map((m) => m.headers['refused.code']).sort()).toEqual([
      'invalid_json',
      'invalid_json',
      'invalid_json',
      'payload_too_large',
      'payload_too_large',
      'payload_too_large',
      'payload_too_large',
      'unsupported_media_type',
      'validation_failed',
      'validation_failed',
    ]);

    const [bad] = byCode('validation_failed').filter((m) => m.key === 'MSKU-bad');
    expect(bad!.value).toBe(invalid.toString());
    expect(bad!.headers).toMatchObject({
      'refused.status': '400',
      'refused.message': '1 invalid track point',
      'client.address': '198.51.100.20',
      'client.api_key_name': 'fleet-a',
      'body.sent_bytes': String(invalid.byteLength),
      'body.kept': 'whole',
    });
    expect(JSON.parse(bad!.headers['refused.details']!)).toEqual([{ index: 0, field: 'lat', message: expect.stringContaining('90') }]);
    expect(Math.abs(Date.parse(bad!.headers['refused.at']!) - bad!.timestamp)).toBeLessThan(1000);

    const json400 = byCode('invalid_json');
    const gz = json400.find((m) => m.key === 'MSKU-gz')!;
    expect([gz.value, gz.headers['content.encoding'], gz.headers['body.kept'], gz.headers['client.address']]).toEqual([
      '[{"container_id":"MSKU-gz"},',
      'gzip',
      'whole',
      '127.0.0.1',
    ]);
    expect(json400.find((m) => m.key === 'MSKU-json')!.value).toBe('[{"container_id":"MSKU-json","lat":');
    expect(json400.find((m) => m.key === '')!.headers['body.kept']).toBe('as received, 26 bytes: not valid gzip');

    const large = byCode('payload_too_large');
    expect(large.find((m) => m.key === 'MSKU-many-0')!.headers['refused.message']).toContain('11 track points');
    const inflated = large.find((m) => m.headers['body.sent_bytes'] === String(bomb.byteLength))!;
    expect([inflated.value.length, inflated.headers['body.kept']]).toEqual([1024, 'cut to 1024 bytes (MQ_REFUSED_MAX_BYTES=1024)']);
    const byLength = large.find((m) => m.headers['body.sent_bytes'] === '5000')!;
    expect([byLength.value, byLength.headers['body.kept']]).toEqual(['', 'none: refused from its headers, the body was not read']);
    const partial = large.find((m) => m.key === 'MSKU-chunked')!;
    expect(partial.headers['body.kept']).toMatch(/^the first 1024 of \d+ bytes read: the rest was not read/);

    const media = byCode('unsupported_media_type')[0]!;
    expect([media.value, media.headers['content.type'], media.headers['body.sent_bytes']]).toEqual(['', 'text/csv', '3']);

    const cut = byCode('validation_failed').find((m) => m.key === 'MSKU-long-0')!;
    expect([cut.value.length, cut.headers['body.kept']]).toEqual([1024, `cut to 1024 of ${long.byteLength} bytes (MQ_REFUSED_MAX_BYTES=1024)`]);
    // Counted once Kafka's acknowledgement is reported (polled every 100 ms).
    await until('10 refused requests counted as written', async () => (await metric(withTopic.url, 'ingest_refused_requests_written_total')) === 10, 5_000);
    expect(await metric(without.url, 'ingest_refused_requests_written_total')).toBe(0);

    // `make refused`: the newest rows, newest last, one line each.
    const { stdout } = await run(process.execPath, [REFUSED_TABLE], { env: { ...process.env, MQ_REFUSED_TOPIC: refusedTopic, REFUSED_LAST: '3' } });
    const lines = stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^TIME\s+CODE\s+FIRST CONTAINER\s+SIZE\s+DETAILS$/);
    expect(lines.slice(1, 4).map((l) => l.split(/\s{2,}/)[1])).toEqual(['415 unsupported_media_type', '400 validation_failed', '413 payload_too_large']);
    expect(lines[2]).toContain('MSKU-long-0');
    expect(lines[2]).toContain('9 invalid track points: point 0 lat:');
    expect(lines[4]).toBe(`3 of the last refused requests on ${refusedTopic}`);
  }, 60_000);
});

describe('a flood of refused requests, and the refused topic gone', () => {
  it('writes at most MQ_REFUSED_RATE a second and counts the rest, while every valid request beside the flood is answered 202 and lands', async () => {
    const refusedTopic = await createTopic(uniqueTopic('refused-flood'), 1);
    const pointsTopic = await createTopic(uniqueTopic('points-flood'), 3);
    const service = await startService({ ...LIMITS, MQ_TOPIC: pointsTopic, MQ_REFUSED_TOPIC: refusedTopic, MQ_REFUSED_RATE: '20' });
    try {
      const started = Date.now();
      const bad = json([point('MSKU-flood', { lat: 95 })]);
      const statuses: number[] = [];
      const valid: number[] = [];
      // 2,000 invalid requests, 20 at a time, with a valid one after every 20.
      for (let round = 0; round < 100; round++) {
        const answers = await Promise.all([
          ...Array.from({ length: 20 }, () => send(service.url, { name: 'bad', body: bad })),
          send(service.url, { name: 'ok', body: json([point(`MSKU-valid-${round}`)]) }),
        ]);
        statuses.push(...answers.slice(0, 20).map((a) => a.status));
        valid.push(answers[20]!.status);
      }
      const seconds = (Date.now() - started) / 1000;
      expect(new Set(statuses)).toEqual(new Set([400]));
      expect(new Set(valid)).toEqual(new Set([202]));
      // The refused-requests producer sends a batch a second: read until none came for 3 s.
      const written = await consumeAll(refusedTopic, { expected: 20, partitions: 1, idleMs: 3000 });
      // The bucket holds a second's worth at the start, then fills at the rate.
      expect(written.length).toBeGreaterThanOrEqual(20);
      expect(written.length).toBeLessThanOrEqual(Math.ceil(20 * (seconds + 1)));
      expect(await metric(service.url, 'ingest_refused_requests_dropped_total{reason="over_rate"}')).toBe(2000 - written.length);
      const points = await consumeAll(pointsTopic, { expected: 100, partitions: 3 });
      expect(new Set(points.map((m) => m.key)).size).toBe(100);
      console.log(
        `refused flood: 2000 invalid requests in ${seconds.toFixed(1)} s at MQ_REFUSED_RATE=20: ${written.length} written, ${2000 - written.length} counted over the rate; 100 valid requests beside them: 202 and in Kafka`,
      );

      // The refused topic deleted: refusals are counted as failed after librdkafka gives up; valid requests never wait for it.
      await deleteTopic(refusedTopic);
      await new Promise((r) => setTimeout(r, 3000));
      const after: number[] = [];
      const t0 = performance.now();
      for (let i = 0; i < 50; i++) {
        const [refused, ok] = await Promise.all([
          send(service.url, { name: 'bad', body: bad }),
          send(service.url, { name: 'ok', body: json([point(`MSKU-after-${i}`)]) }),
        ]);
        after.push(refused.status, ok.status);
      }
      const ms = performance.now() - t0;
      expect(after.filter((s, i) => s !== (i % 2 === 0 ? 400 : 202))).toEqual([]);
      const later = await consumeAll(pointsTopic, { expected: 150, partitions: 3 });
      expect(new Set(later.map((m) => m.key)).size).toBe(150);
      console.log(`refused topic deleted: 50 valid requests beside 50 refused in ${ms.toFixed(0)} ms, all 202 and in Kafka`);
    } finally {
      await service.stop();
      await deleteTopic(pointsTopic);
    }
  }, 120_000);

  it('says at start when MQ_REFUSED_TOPIC does not exist, and serves valid requests all the same', async () => {
    const missing = uniqueTopic('refused-missing');
    const pointsTopic = await createTopic(uniqueTopic('points-missing'), 3);
    const service = await startService({ ...LIMITS, MQ_TOPIC: pointsTopic, MQ_REFUSED_TOPIC: missing });
    try {
      await until('the warning', async () => service.output.some((l) => l.includes(`MQ_REFUSED_TOPIC ${missing} does not exist`)), 10_000);
      expect((await send(service.url, { name: 'ok', body: json([point('MSKU-1')]) })).status).toBe(202);
      expect((await send(service.url, { name: 'bad', body: Buffer.from('[') })).status).toBe(400);
    } finally {
      await service.stop();
      await deleteTopic(pointsTopic);
    }
  }, 60_000);
});

describe("the refused topic's producer, connected only while there are refusals", () => {
  it('disconnects after the check at start and after MQ_REFUSED_IDLE_MS without a refusal; the next refusals connect it again and are all written, those sent while it connects too', async () => {
    const refusedTopic = await createTopic(uniqueTopic('refused-idle'), 1);
    const pointsTopic = await createTopic(uniqueTopic('points-idle'), 1);
    const service = await startService({ ...LIMITS, LOG_LEVEL: 'debug', MQ_TOPIC: pointsTopic, MQ_REFUSED_TOPIC: refusedTopic, MQ_REFUSED_IDLE_MS: '500' });
    const closings = () => service.output.filter((l) => l.includes('refused-requests producer closed: idle')).length;
    const refuseBurst = async (prefix: string) => {
      const answers = await Promise.all(
        Array.from({ length: 5 }, (_, i) => send(service.url, { name: 'bad', body: json([point(`${prefix}-${i}`, { lat: 95 })]) })),
      );
      expect(answers.map((a) => a.status)).toEqual([400, 400, 400, 400, 400]);
    };
    try {
      await until('the producer closed after looking for the topic at start', async () => closings() === 1, 10_000);
      await refuseBurst('MSKU-idle-a');
      await until('the first 5 refusals written', async () => (await metric(service.url, 'ingest_refused_requests_written_total')) === 5, 15_000);
      await until('the producer closed again, idle', async () => closings() === 2, 10_000);
      await refuseBurst('MSKU-idle-b');
      await until('the next 5 written', async () => (await metric(service.url, 'ingest_refused_requests_written_total')) === 10, 15_000);
      const kept = await consumeAll(refusedTopic, { expected: 10, partitions: 1, idleMs: 1500 });
      expect(kept.map((m) => m.key).sort()).toEqual([...['a', 'b'].flatMap((p) => Array.from({ length: 5 }, (_, i) => `MSKU-idle-${p}-${i}`))].sort());
      expect((await send(service.url, { name: 'ok', body: json([point('MSKU-1')]) })).status).toBe(202);
      expect(await metric(service.url, 'ingest_refused_requests_dropped_total{reason="queue_full"}')).toBe(0);
    } finally {
      await service.stop();
      await deleteTopic(refusedTopic);
      await deleteTopic(pointsTopic);
    }
  }, 90_000);
});
