// Every status of the README's API table, over real HTTP to the real
// service (one worker) producing to a real Kafka topic.
import { Agent, request } from 'node:http';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeAll, createTopic, uniqueTopic } from '../../support/kafka.js';
import { parseAnswer, raw } from '../helpers/raw-http.js';
import { metric, point, postTrack, startService, until, type Service } from '../helpers/service.js';
import { fileTopic } from '../helpers/topic.js';

let svc: Service;
const topic = fileTopic('http');
const MAX_POINTS = 50;
const MAX_BODY_BYTES = 64 * 1024;

beforeAll(async () => {
  svc = await startService({ MQ_TOPIC: topic, MAX_POINTS: String(MAX_POINTS), MAX_BODY_BYTES: String(MAX_BODY_BYTES) });
});
afterAll(async () => {
  expect(await svc?.stop()).toBe(0);
});

async function bodyBytesRead(): Promise<number> {
  const text = await (await fetch(`${svc.url}/metrics`)).text();
  return Number(/^ingest_request_body_bytes_total (\d+)/m.exec(text)![1]);
}

describe('POST /track', () => {
  it('202 with {"accepted": N} for a valid array', async () => {
    const r = await postTrack(svc.url, [point('a'), point('b', { speed: 2 })]);
    expect([r.status, r.json]).toEqual([202, { accepted: 2 }]);
    expect(r.headers.get('content-type')).toBe('application/json');
  });

  it('202 with {"accepted": 0} for an empty array', async () => {
    const r = await postTrack(svc.url, []);
    expect([r.status, r.json]).toEqual([202, { accepted: 0 }]);
  });

  it.each([
    ['malformed JSON', '[{"container_id":', 'invalid_json'],
    ['an empty body', '', 'invalid_json'],
    ['trailing garbage', '[]]', 'invalid_json'],
    ['a JSON object', '{"container_id":"x"}', 'validation_failed'],
    ['null', 'null', 'validation_failed'],
  ])('400 for %s', async (_name, body, code) => {
    const r = await postTrack(svc.url, body);
    expect([r.status, r.json.error]).toEqual([400, code]);
    expect(typeof r.json.message).toBe('string');
  });

  it('400 for invalid UTF-8', async () => {
    const body = Buffer.concat([Buffer.from('[{"container_id":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}]')]);
    const r = await postTrack(svc.url, body);
    expect([r.status, r.json.error]).toEqual([400, 'invalid_json']);
  });

  it('400 with per-point details for invalid points, and the whole request refused', async () => {
    const r = await postTrack(svc.url, [point('ok'), point('bad', { lat: -91 }), point('bad2', { speed: -1, timestamp: 'yesterday' })]);
    expect(r.status).toBe(400);
    expect(r.json).toEqual({
      error: 'validation_failed',
      message: '2 invalid track points',
      details: [
        { index: 1, field: 'lat', message: 'must be between -90 and 90' },
        { index: 2, field: 'timestamp', message: 'must be an RFC 3339 date-time such as 2024-05-01T12:00:00Z' },
        { index: 2, field: 'speed', message: 'must be at least 0' },
      ],
    });
  });

  it('413 for more than MAX_POINTS points', async () => {
    const r = await postTrack(
      svc.url,
      Array.from({ length: MAX_POINTS + 1 }, (_, i) => point(`c${i}`)),
    );
    expect([r.status, r.json.error]).toEqual([413, 'payload_too_large']);
    expect(String(r.json.message)).toContain('MAX_POINTS');
  });

  it('413 for a body over MAX_BODY_BYTES', async () => {
    const r = await postTrack(svc.url, ' '.repeat(MAX_BODY_BYTES + 1));
    expect([r.status, r.json.error]).toEqual([413, 'payload_too_large']);
  });

  it('413 from Content-Length alone, before any of a 10 MB body is sent', async () => {
    const { text } = await raw(svc.port, (s) => {
      s.write(`POST /track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${10 * 1024 * 1024}\r\n\r\n`);
    });
    expect(text).toMatch(/^HTTP\/1\.1 413 /);
    expect(text).toMatch(/\r\nconnection: close\r\n/i);
    expect(text).toContain('"payload_too_large"');
  });

  it('413 for a chunked upload once it passes the limit; the server stops reading long before 10 MB', async () => {
    const before = await bodyBytesRead();
    let sent = 0;
    const { text } = await raw(
      svc.port,
      (s) => {
        s.write('POST /track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n');
        const chunk = ' '.repeat(16 * 1024);
        const pump = () => {
          while (sent < 10 * 1024 * 1024 && !s.destroyed) {
            sent += chunk.length;
            if (!s.write(`${chunk.length.toString(16)}\r\n${chunk}\r\n`)) return void s.once('drain', pump);
          }
        };
        pump();
      },
      1000,
    );
    expect(text).toMatch(/^HTTP\/1\.1 413 /);
    expect(text).toMatch(/\r\nconnection: close\r\n/i);
    // The client may have pushed a few MB into socket buffers; the server itself read about the limit.
    const read = (await bodyBytesRead()) - before;
    expect(read).toBeGreaterThan(MAX_BODY_BYTES);
    expect(read).toBeLessThan(MAX_BODY_BYTES + 256 * 1024);
  });

  it.each(['text/plain', 'application/x-www-form-urlencoded', 'application/jsonx'])('415 for Content-Type %s', async (type) => {
    const r = await postTrack(svc.url, [point('a')], { 'content-type': type });
    expect([r.status, r.json.error]).toEqual([415, 'unsupported_media_type']);
  });

  it.each(['application/json; charset=utf-8', 'Application/JSON'])('accepts Content-Type %s', async (type) => {
    expect((await postTrack(svc.url, [point('a')], { 'content-type': type })).status).toBe(202);
  });

  it('reads a body without Content-Type as JSON', async () => {
    const { text } = await raw(svc.port, (s) => {
      const body = JSON.stringify([point('no-type')]);
      s.write(`POST /track HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    });
    expect(text).toMatch(/^HTTP\/1\.1 202 /);
  });

  it('reads gzip bodies and refuses other encodings with 415', async () => {
    const body = gzipSync(JSON.stringify([point('gz1'), point('gz2')]));
    expect((await postTrack(svc.url, body, { 'content-encoding': 'gzip' })).json).toEqual({ accepted: 2 });
    const br = await postTrack(svc.url, body, { 'content-encoding': 'br' });
    expect([br.status, br.json.error]).toEqual([415, 'unsupported_media_type']);
  });

  it('413 for a gzip body that inflates past MAX_BODY_BYTES', async () => {
    const r = await postTrack(svc.url, gzipSync(' '.repeat(MAX_BODY_BYTES * 4)), { 'content-encoding': 'gzip' });
    expect([r.status, r.json.error]).toEqual([413, 'payload_too_large']);
  });

  it('reads a chunked body', async () => {
    const body = JSON.stringify([point('chunked')]);
    const { text } = await raw(svc.port, (s) => {
      s.write('POST /track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n');
      for (const part of [body.slice(0, 10), body.slice(10, 30), body.slice(30)]) s.write(`${Buffer.byteLength(part).toString(16)}\r\n${part}\r\n`);
      s.write('0\r\n\r\n');
    });
    expect(text).toMatch(/^HTTP\/1\.1 202 /);
    expect(text).toContain('{"accepted":1}');
  });

  it('answers Expect: 100-continue with 100, then 202', async () => {
    const body = JSON.stringify([point('expect')]);
    const { text } = await raw(svc.port, (s) => {
      s.write(`POST /track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\n\r\n`);
      s.once('data', () => s.write(body));
    });
    expect(text).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 202 /);
  });

  it('serves many requests on one keep-alive connection', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const reused: boolean[] = [];
    for (let i = 0; i < 5; i++) {
      const status = await new Promise<number>((resolve, reject) => {
        const req = request(`${svc.url}/track`, { method: 'POST', agent, headers: { 'content-type': 'application/json' } }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode!));
        });
        req.on('error', reject);
        req.end(JSON.stringify([point(`ka${i}`)]));
        reused.push(req.reusedSocket);
      });
      expect(status).toBe(202);
    }
    agent.destroy();
    expect(reused).toEqual([false, true, true, true, true]);
  });
});

describe('other methods and paths', () => {
  it.each(['GET', 'PUT', 'DELETE', 'PATCH'])('405 with Allow: POST for %s /track', async (method) => {
    const res = await fetch(`${svc.url}/track`, { method });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('POST');
    expect(((await res.json()) as { error: string }).error).toBe('method_not_allowed');
  });

  it('404 with a JSON body for an unknown path', async () => {
    const res = await fetch(`${svc.url}/tracks`, { method: 'POST', body: '[]' });
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ error: 'not_found' });
  });

  it('GET /healthz and /readyz answer 200', async () => {
    const health = await fetch(`${svc.url}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: 'ok' });
    expect((await fetch(`${svc.url}/readyz`)).status).toBe(200);
  });

  it('GET /metrics answers Prometheus text with the request counters', async () => {
    const res = await fetch(`${svc.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/plain');
    const text = await res.text();
    expect(text).toMatch(/^ingest_http_requests_total\{route="\/track",status="202"\} [1-9]/m);
    expect(text).toMatch(/^ingest_points_accepted_total [1-9]/m);
  });

  it('GET /openapi.json serves the generated document', async () => {
    const doc = (await (await fetch(`${svc.url}/openapi.json`)).json()) as { openapi: string; paths: Record<string, unknown> };
    expect(doc.openapi).toBe('3.1.0');
    expect(Object.keys(doc.paths)).toContain('/track');
  });
});

describe('when the producer cannot take the points', () => {
  it('500 topic_unknown with Retry-After when the topic does not exist', async () => {
    const other = await startService({ MQ_TOPIC: uniqueTopic('missing') }, { waitFor: 'healthy' });
    try {
      expect((await fetch(`${other.url}/readyz`)).status).toBe(503);
      const r = await postTrack(other.url, [point('x')]);
      expect([r.status, r.json.error, r.headers.get('retry-after')]).toEqual([500, 'topic_unknown', '1']);
      expect(await metric(other.url, 'ingest_requests_rejected_total{reason="topic_unknown"}')).toBe(1);
    } finally {
      await other.stop();
    }
  });

  it('500 broker_unavailable with Retry-After when no broker is reachable', async () => {
    const other = await startService({ MQ_BROKERS: '127.0.0.1:1', MQ_TOPIC: topic }, { waitFor: 'healthy' });
    try {
      const ready = await fetch(`${other.url}/readyz`);
      expect(ready.status).toBe(503);
      const r = await postTrack(other.url, [point('x')]);
      expect([r.status, r.json.error, r.headers.get('retry-after')]).toEqual([500, 'broker_unavailable', '1']);

      // Refused before its body is read, a request's body is still skipped to its end: on one
      // keep-alive connection, bodies sent whole, in parts after the answer came, and chunked are
      // each answered once, and nothing of them is taken for the next request.
      const body = JSON.stringify(Array.from({ length: 40 }, (_, i) => point(`skip${i}`)));
      const head = (extra: string) => `POST /track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${extra}\r\n`;
      const { text, closed } = await raw(other.port, (s) => {
        s.write(head(`Content-Length: ${body.length}\r\n`) + body);
        s.write(head(`Content-Length: ${body.length}\r\n`) + body.slice(0, 100));
        s.once('data', () => {
          s.write(body.slice(100));
          s.write(head('Transfer-Encoding: chunked\r\n') + `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`);
          s.write(head('Content-Length: 2\r\n') + '[]');
        });
      });
      expect(closed).toBe(false);
      const answers = text.split(/(?=HTTP\/1\.1 )/);
      expect(answers.map((a) => parseAnswer(a).status)).toEqual([500, 500, 500, 500]);
      expect(answers.map((a) => (parseAnswer(a).body as { error: string }).error)).toEqual(Array(4).fill('broker_unavailable'));
    } finally {
      await other.stop('SIGKILL');
    }
  });

  it('413 payload_too_large for a point whose Kafka message would pass message.max.bytes: the request refused whole, nothing produced', async () => {
    // A valid point can be that long: RFC 3339 sets no limit to the fraction of a second.
    const topicOf413 = await createTopic(uniqueTopic('too-large'));
    const other = await startService({ MQ_TOPIC: topicOf413, MQ_OPT_MESSAGE_MAX_BYTES: '1000' });
    try {
      const long = point('long', { timestamp: `2024-05-01T12:00:00.${'1'.repeat(1_200)}Z` });
      const r = await postTrack(other.url, [point('fits-1'), long]);
      expect([r.status, r.json.error]).toEqual([413, 'payload_too_large']);
      expect(r.json.message).toMatch(/^a track point encodes to \d+ bytes, above the Kafka message size limit/);
      const ok = await postTrack(other.url, [point('fits-2')]);
      expect([ok.status, ok.json]).toEqual([202, { accepted: 1 }]);
      const keys = (await consumeAll(topicOf413, { expected: 1 })).map((m) => m.key);
      expect(keys).toEqual(['fits-2']);
    } finally {
      expect(await other.stop()).toBe(0);
    }
  });

  // A queue of 15 points and requests of 10: a second request never fits while the first is queued.
  const smallQueue = (env: Record<string, string>) => startService({ MQ_TOPIC: topic, MAX_POINTS: '10', PRODUCER_QUEUE_MAX_POINTS: '15', ...env });
  const tenPoints = (tag: string) => Array.from({ length: 10 }, (_, i) => point(`${tag}${i}`));

  it('500 when the producer queue is above its high-water mark, accepting nothing of that request', async () => {
    // linger.ms=2000 keeps the first request's points in the queue while the second arrives.
    const other = await smallQueue({ MQ_OPT_LINGER_MS: '2000' });
    try {
      const batch = tenPoints('q');
      expect((await postTrack(other.url, batch)).status).toBe(202);
      // The queue depth is librdkafka's count, refreshed every 100 ms: let it see the first request.
      await new Promise((r) => setTimeout(r, 300));
      const second = await postTrack(other.url, batch);
      expect([second.status, second.json.error, second.headers.get('retry-after')]).toEqual([500, 'queue_full', '1']);
      expect(String(second.json.message)).toContain('queue is full');
      const metrics = await (await fetch(`${other.url}/metrics`)).text();
      expect(metrics).toMatch(/^ingest_requests_rejected_total\{reason="queue_full"\} 1$/m);
      expect(metrics).toMatch(/^ingest_requests_rejected_total\{reason="broker_unavailable"\} 0$/m);
    } finally {
      expect(await other.stop()).toBe(0);
    }
  });

  it('a request that finds the queue full waits for room (QUEUE_FULL_WAIT_MS) and is taken once Kafka acknowledged the points before it', async () => {
    // linger.ms=500 keeps the first request's points queued for half a second.
    const other = await smallQueue({ MQ_OPT_LINGER_MS: '500', QUEUE_FULL_WAIT_MS: '5000' });
    try {
      expect((await postTrack(other.url, tenPoints('f'))).status).toBe(202);
      const sent = Date.now();
      const waiting = Promise.all([postTrack(other.url, tenPoints('s')), postTrack(other.url, tenPoints('t'))]);
      await new Promise((r) => setTimeout(r, 150));
      expect(await metric(other.url, 'ingest_requests_waiting_for_room')).toBe(2);
      const [second, third] = await waiting;
      expect([second.status, second.json, third.status, third.json]).toEqual([202, { accepted: 10 }, 202, { accepted: 10 }]);
      expect(Date.now() - sent).toBeGreaterThanOrEqual(400);
      expect(await metric(other.url, 'ingest_requests_rejected_total{reason="queue_full"}')).toBe(0);
      await until('all 30 points acknowledged', async () => (await metric(other.url, 'ingest_messages_delivered_total')) === 30, 10_000);
    } finally {
      expect(await other.stop()).toBe(0);
    }
  });

  it('once a request did not fit below the high-water mark, the next are refused before their body is read, until Kafka took points', async () => {
    // QUEUE_FULL_WAIT_MS=0: each request is answered at once, so what is refused from its headers shows.
    const other = await smallQueue({ MQ_OPT_LINGER_MS: '2000', QUEUE_FULL_WAIT_MS: '0' });
    try {
      expect((await postTrack(other.url, tenPoints('f'))).status).toBe(202);
      await new Promise((r) => setTimeout(r, 300));
      // 10 queued of 15: this request passes the check on its headers, is read, and does not fit.
      const second = await postTrack(other.url, tenPoints('s'));
      expect([second.status, second.json.error]).toEqual([500, 'queue_full']);
      // Statistics (every 100 ms) that show the same depth do not clear it: Kafka took nothing yet.
      await new Promise((r) => setTimeout(r, 250));
      // The next is refused from its headers: a body that is not even JSON gets the same 500, not a 400.
      const third = await postTrack(other.url, 'not json');
      expect([third.status, third.json.error, third.headers.get('retry-after')]).toEqual([500, 'queue_full', '1']);
      expect(String(third.json.message)).toContain('queue is full');
      // Once the linger ends and Kafka acknowledges the first 10, the statistics say so: points are taken again.
      await until('a request taken again', async () => (await postTrack(other.url, tenPoints('t'))).status === 202, 10_000);
      expect(await metric(other.url, 'ingest_points_accepted_total')).toBe(20);
    } finally {
      expect(await other.stop()).toBe(0);
    }
  });
});
