// deploy/gateway/haproxy.cfg in front of the real service: its health check reads /readyz over
// HTTP/1.1 (HAProxy's default check speaks HTTP/1.0, which the service does not answer), and what it
// refuses never reaches the service.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startHaproxy, type Haproxy } from '../../support/gateway.js';
import { parseAnswer, raw } from '../helpers/raw-http.js';
import { freePort } from '../../support/ports.js';
import { metric, point, postTrack, startService, type Service } from '../helpers/service.js';
import { fileTopic } from '../helpers/topic.js';

const MAX_BODY_BYTES = 64 * 1024;
/** The check runs every second and two failures mark the server down (haproxy.cfg). */
const CHECK_VERDICT_MS = 3_000;

const topic = fileTopic('haproxy');
let svc: Service;
let proxy: Haproxy;

beforeAll(async () => {
  svc = await startService({ MQ_TOPIC: topic, MAX_BODY_BYTES: String(MAX_BODY_BYTES) });
  proxy = await startHaproxy(`127.0.0.1:${svc.port}`, MAX_BODY_BYTES);
  // Long enough for failing checks to have marked the server down.
  await new Promise((r) => setTimeout(r, CHECK_VERDICT_MS));
});
afterAll(async () => {
  await proxy?.stop();
  expect(await svc?.stop()).toBe(0);
});

const serviceRequests = async () => (await metric(svc.url, 'ingest_http_request_duration_seconds_count')) ?? 0;
const port = () => Number(new URL(proxy.url).port);

describe('HAProxy in front of the service', () => {
  it('keeps a ready service in rotation (its check passes over HTTP/1.1) and passes answers through', async () => {
    const ok = await postTrack(proxy.url, [point(`hap-${randomUUID()}`)]);
    expect([ok.status, ok.json]).toEqual([202, { accepted: 1 }]);
    const bad = await postTrack(proxy.url, [point('x', { lat: 100 })]);
    expect(bad.status).toBe(400);
    expect(bad.json).toEqual((await postTrack(svc.url, [point('x', { lat: 100 })])).json);
    expect(proxy.output.join('\n')).not.toMatch(/is DOWN/);
  });

  it('takes an unready service out of rotation (503 JSON with Retry-After)', async () => {
    const unready = await startService({ MQ_BROKERS: `127.0.0.1:${await freePort()}` }, { waitFor: 'healthy' });
    const front = await startHaproxy(`127.0.0.1:${unready.port}`, MAX_BODY_BYTES);
    try {
      await new Promise((r) => setTimeout(r, CHECK_VERDICT_MS));
      const res = await fetch(`${front.url}/track`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '[]' });
      expect([res.status, res.headers.get('retry-after'), await res.json()]).toEqual([
        503,
        '1',
        { error: 'service_unavailable', message: 'no ready ingestion service; retry' },
      ]);
      expect(front.output.join('\n')).toMatch(/Layer7 wrong status.*code: 503/);
    } finally {
      await front.stop();
      await unready.stop('SIGKILL');
    }
  });

  it('answers an HTTP/1.0 client 505 JSON instead of forwarding it to a service that would not answer', async () => {
    const { text } = await raw(port(), (s) => s.write('POST /track HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]'));
    expect(parseAnswer(text)).toMatchObject({ status: 505, body: { error: 'http_version_not_supported' } });
  });

  it.each([
    ['two different Content-Length headers', 'Content-Length: 2\r\nContent-Length: 3\r\n\r\n[]]'],
    ['a 100 KB header block', `X-Big: ${'a'.repeat(100_000)}\r\nContent-Length: 2\r\n\r\n[]`],
  ])('refuses %s with 400 before the service', async (_name, tail) => {
    const before = await serviceRequests();
    const { text } = await raw(port(), (s) => s.write(`POST /track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${tail}`), 1_000);
    expect(parseAnswer(text).status).toBe(400);
    expect(await serviceRequests()).toBe(before);
  });

  it('refuses a body over MAX_BODY_BYTES with 413 JSON and does not serve /metrics', async () => {
    const before = await serviceRequests();
    const big = await postTrack(proxy.url, ' '.repeat(MAX_BODY_BYTES + 1));
    expect([big.status, big.json.error]).toEqual([413, 'payload_too_large']);
    expect(await serviceRequests()).toBe(before);
    const m = await fetch(`${proxy.url}/metrics`);
    expect([m.status, await m.json()]).toEqual([404, { error: 'not_found', message: 'no such path; POST /track takes track points' }]);
  });
});
