// The service on whatever Node runs this file, quickly: it starts, loads a native uWebSockets.js build,
// answers one request of each status it has, and what it took is in Kafka. Part of `make test`; alone
// it is the smoke run on Node 22 (scripts/test-in-root.sh --smoke 22), where the full suite runs on 24.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gzipSync } from 'node:zlib';
import { consumeAll } from '../../support/kafka.js';
import { point, postTrack, startService, type Service } from '../helpers/service.js';
import { fileTopic } from '../helpers/topic.js';

const topic = fileTopic('smoke');
let svc: Service;
let down: Service;

beforeAll(async () => {
  svc = await startService({ MQ_TOPIC: topic, WORKERS: '2', MAX_POINTS: '5' });
  // No broker at all: every request it would take is refused.
  down = await startService({ MQ_BROKERS: '127.0.0.1:1', MQ_TOPIC: topic }, { waitFor: 'healthy' });
}, 60_000);
afterAll(async () => {
  await Promise.all([svc?.stop(), down?.stop()]);
});

describe(`the service on Node ${process.version}`, () => {
  it('runs on a native uWebSockets.js build, and says which with Node and glibc at start', () => {
    const start = svc.output.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === 'starting workers');
    expect(start).toMatchObject({ uws: expect.stringMatching(/^20\.(57|30)\.0$/), node: process.version });
    expect(svc.output.join('\n')).not.toMatch(/Falling back to a NodeJS implementation/);
  });

  it('answers each status with its JSON, and puts what it took in Kafka', async () => {
    const statuses: [string, number, unknown][] = [];
    const send = async (what: string, body: unknown, headers: Record<string, string> = {}) => {
      const r = await postTrack(svc.url, body, headers);
      statuses.push([what, r.status, r.json.error ?? r.json.accepted]);
    };
    await send('points', [point('smoke-1'), point('smoke-2', { speed: 3 })]);
    await send('gzip', gzipSync(JSON.stringify([point('smoke-3')])), { 'content-encoding': 'gzip' });
    await send('not JSON', '[{');
    await send('an invalid point', [point('x', { lat: 91 })]);
    await send(
      'too many points',
      Array.from({ length: 6 }, (_, i) => point(`many-${i}`)),
    );
    await send('not JSON by its type', '[]', { 'content-type': 'text/plain' });
    const get = await fetch(`${svc.url}/track`);
    statuses.push(['GET /track', get.status, ((await get.json()) as { error: string }).error]);
    const nowhere = await fetch(`${svc.url}/nowhere`, { method: 'POST' });
    statuses.push(['unknown path', nowhere.status, ((await nowhere.json()) as { error: string }).error]);
    const refused = await postTrack(down.url, [point('smoke-refused')]);
    statuses.push(['no broker', refused.status, refused.json.error]);
    expect(statuses).toEqual([
      ['points', 202, 2],
      ['gzip', 202, 1],
      ['not JSON', 400, 'invalid_json'],
      ['an invalid point', 400, 'validation_failed'],
      ['too many points', 413, 'payload_too_large'],
      ['not JSON by its type', 415, 'unsupported_media_type'],
      ['GET /track', 405, 'method_not_allowed'],
      ['unknown path', 404, 'not_found'],
      ['no broker', 500, 'broker_unavailable'],
    ]);
    const messages = await consumeAll(topic, { expected: 3 });
    expect(messages.map((m) => m.key).sort()).toEqual(['smoke-1', 'smoke-2', 'smoke-3']);
    expect(JSON.parse(messages.find((m) => m.key === 'smoke-2')!.value)).toEqual({
      container_id: 'smoke-2',
      lat: 51.9,
      lon: 4.4,
      timestamp: '2024-05-01T12:00:00Z',
      speed: 3,
    });
  });
});
