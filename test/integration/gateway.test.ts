// The deployment the spec describes: the reference gateway (scripts/gateway.sh: nginx + Lua, rate
// limits in Redis) in front of the real service, producing to a real Kafka topic that is read back.
import { spawn, execFile } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { connect as connectTcp } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EARLIEST_IDLE_CLOSE_S, idleCloseS, uwsBuild } from '../../src/http/uws.js';
import { addApiKey, gatewayKeys, startGateway, type Gateway } from '../../support/gateway.js';
import { consumeAll, createTopic, deleteTopic, uniqueTopic } from '../../support/kafka.js';
import { parseAnswer, raw } from '../helpers/raw-http.js';
import { freePort } from '../../support/ports.js';
import { metric, point, startService, until, type Service } from '../helpers/service.js';
import { fileTopic } from '../helpers/topic.js';

const MAX_POINTS = 50;
const MAX_BODY_BYTES = 64 * 1024;
const RATE_LIMIT = 20;
// How long each gateway keeps a key's lookup here: a revoked key is refused within it.
const KEY_CACHE_S = 1;
const run = randomUUID().slice(0, 8);

const topic = fileTopic('gateway');
const refusedTopic = uniqueTopic('gateway-refused');
let svc: Service;
/** Two instances sharing one Redis (keys and counts), API keys required, counts synced every 10 ms. */
let gwA: Gateway;
let gwB: Gateway;
/** A key without a limit, for the tests that are not about limits. */
let anyKey: string;

beforeAll(async () => {
  await createTopic(refusedTopic, 1);
  // The refused-requests topic trusts the gateway's X-Forwarded-For and X-Api-Key-Name.
  svc = await startService({
    MQ_TOPIC: topic,
    MAX_POINTS: String(MAX_POINTS),
    MAX_BODY_BYTES: String(MAX_BODY_BYTES),
    MQ_REFUSED_TOPIC: refusedTopic,
    TRUST_GATEWAY_HEADERS: '1',
  });
  const env = { GATEWAY_RATE_LIMIT: String(RATE_LIMIT), MAX_BODY_BYTES: String(MAX_BODY_BYTES), GATEWAY_KEY_CACHE_S: String(KEY_CACHE_S) };
  gwA = await startGateway({ upstream: `127.0.0.1:${svc.port}`, env }); // starts its own Redis
  gwB = await startGateway({ upstream: `127.0.0.1:${svc.port}`, env, redisUrl: gwA.redisUrl });
  anyKey = await addApiKey(gwA.redisUrl, `any-${run}`, 0);
});
afterAll(async () => {
  await gwB?.stop();
  await gwA?.stop();
  expect(await svc?.stop()).toBe(0);
  await deleteTopic(refusedTopic);
});

/** A new fleet's key in the gateways' Redis, with its own limit (requests per second). */
const newKey = (limit = RATE_LIMIT) => addApiKey(gwA.redisUrl, `fleet-${randomUUID().slice(0, 8)}`, limit);

interface Answer {
  status: number;
  body: unknown;
  retryAfter: string | null;
  allow: string | null;
  contentType: string | null;
  /** Idempotent-Replayed: the gateway answered with a kept answer of an earlier request. */
  replayed: string | null;
}

const pool = new Agent({ keepAlive: true, maxSockets: 64 });

/** One request over a pooled HTTP/1.1 connection; every request of a test names its own client key. */
function send(url: string, opts: { method?: string; path?: string; body?: string | Buffer; headers?: Record<string, string> }): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${opts.path ?? '/track'}`, { method: opts.method ?? 'POST', agent: pool, headers: opts.headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => {
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {
          /* not JSON: the assertion shows it */
        }
        const header = (name: string) => (res.headers[name] === undefined ? null : String(res.headers[name]));
        resolve({
          status: res.statusCode ?? 0,
          body,
          retryAfter: header('retry-after'),
          allow: header('allow'),
          contentType: header('content-type'),
          replayed: header('idempotent-replayed'),
        });
      });
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

const json = (apiKey: string, extra: Record<string, string> = {}) => ({ 'content-type': 'application/json', 'x-api-key': apiKey, ...extra });

/** /track requests the service has answered (all of them, whatever their status). */
const serviceRequests = async () => (await metric(svc.url, 'ingest_http_request_duration_seconds_count')) ?? 0;

/** Waits for the start of the next wall-clock second: the limit counts in one-second windows. */
async function startOfSecond(): Promise<void> {
  await new Promise((r) => setTimeout(r, 1000 - (Date.now() % 1000) + 5));
}

/** `n` requests at once, with one client key; the statuses they got, tallied. */
async function burst(url: string, apiKey: string, n: number): Promise<Answer[]> {
  return Promise.all(Array.from({ length: n }, () => send(url, { body: JSON.stringify([]), headers: json(apiKey) })));
}
/** What a gateway logged after `from` lines (its output's length when a test began to look). */
const loggedSince = (gw: Gateway, from: number) => gw.output.slice(from).join('\n');

const tally = (answers: Answer[]) => answers.reduce<Record<number, number>>((t, a) => ({ ...t, [a.status]: (t[a.status] ?? 0) + 1 }), {});

describe('the service behind the reference gateway', () => {
  const cases: [string, { method?: string; body?: string | Buffer; headers?: Record<string, string> }][] = [
    ['202 for a valid array', { body: JSON.stringify([point(`${run}-same-1`), point(`${run}-same-2`, { speed: 3 })]) }],
    ['202 for an empty array', { body: '[]' }],
    ['400 for malformed JSON', { body: '[{"container_id":' }],
    ['400 with details for invalid points', { body: JSON.stringify([point('x', { lat: 91 }), point('y', { speed: -1 })]) }],
    ['413 for more than MAX_POINTS points', { body: JSON.stringify(Array.from({ length: MAX_POINTS + 1 }, () => point('many'))) }],
    ['415 for another Content-Type', { body: '[]', headers: { 'content-type': 'text/plain' } }],
    ['415 for another Content-Encoding', { body: '[]', headers: { 'content-encoding': 'br' } }],
    ['202 for a gzip body', { body: gzipSync(JSON.stringify([point(`${run}-same-zip`)])), headers: { 'content-encoding': 'gzip' } }],
    ['405 for GET', { method: 'GET' }],
  ];
  it.each(cases)('%s: status, JSON body, Allow and Retry-After exactly as the service answers', async (_name, req) => {
    const headers = { ...json(anyKey), ...req.headers };
    const direct = await send(svc.url, { ...req, headers });
    const via = await send(gwA.url, { ...req, headers });
    expect(via).toEqual(direct);
    expect(via.contentType).toBe('application/json');
  });

  it('delivers every point to Kafka, from HTTP/1.1, gzip and HTTP/1.0 clients (one without Host)', async () => {
    const key = anyKey;
    const plain = [point(`${run}-h11`, { speed: 1.5 }), point(`${run}-h11`, { lat: -12.25 })];
    const zipped = [point(`${run}-gz`)];
    const old = [point(`${run}-h10`, { lon: 179.5 })];
    expect((await send(gwA.url, { body: JSON.stringify(plain), headers: json(key) })).status).toBe(202);
    expect((await send(gwA.url, { body: gzipSync(JSON.stringify(zipped)), headers: json(key, { 'content-encoding': 'gzip' }) })).status).toBe(202);
    const body = JSON.stringify(old);
    const { text } = await raw(gwA.port, (s) =>
      s.write(`POST /track HTTP/1.0\r\nContent-Type: application/json\r\nX-Api-Key: ${key}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`),
    );
    expect(parseAnswer(text)).toMatchObject({ status: 202, body: { accepted: 1 } });

    const messages = await consumeAll(topic, { expected: 4, idleMs: 1_000 });
    const ours = messages.filter((m) => /-(h11|gz|h10)$/.test(m.key) && m.key.startsWith(run));
    const expected = [...plain, ...zipped, ...old].map((p) => JSON.stringify({ speed: 0, ...p }));
    expect(ours.map((m) => JSON.parse(m.value) as Record<string, unknown>).sort(byKey)).toEqual(
      expected.map((e) => JSON.parse(e) as Record<string, unknown>).sort(byKey),
    );
  });

  it('serves ApacheBench (HTTP/1.0): every request answered 202 with a body, every point in Kafka', async () => {
    const key = await newKey();
    const file = join(tmpdir(), `ab-${run}.json`);
    writeFileSync(file, JSON.stringify([point(`${run}-ab`)]));
    // Within the limit (20 a second) whatever the windows: exactly 20 requests.
    const { stdout } = await promisify(execFile)('ab', [
      '-n',
      '20',
      '-c',
      '2',
      '-p',
      file,
      '-T',
      'application/json',
      '-H',
      `X-Api-Key: ${key}`,
      `${gwA.url}/track`,
    ]);
    expect(stdout).toMatch(/^Complete requests:\s+20$/m);
    expect(stdout).not.toMatch(/Non-2xx responses/);
    expect(stdout).toMatch(/^Failed requests:\s+0$/m);
    // 20 answers of '{"accepted":1}': ab counts body bytes, which stay 0 when nothing answers.
    expect(stdout).toMatch(/^HTML transferred:\s+280 bytes$/m);
    const messages = await consumeAll(topic, { expected: 1, idleMs: 1_000 });
    expect(messages.filter((m) => m.key === `${run}-ab`)).toHaveLength(20);
  });

  it('refuses a body over MAX_BODY_BYTES with 413 JSON, before the service reads it', async () => {
    const before = await serviceRequests();
    const r = await send(gwA.url, { body: ' '.repeat(MAX_BODY_BYTES + 1), headers: json(anyKey) });
    expect([r.status, r.body]).toEqual([413, { error: 'payload_too_large', message: `body is larger than ${MAX_BODY_BYTES} bytes (MAX_BODY_BYTES)` }]);
    expect(await serviceRequests()).toBe(before);
  });

  it.each([
    ['two different Content-Length headers', 'Content-Length: 2\r\nContent-Length: 3\r\n\r\n[]]'],
    ['Content-Length with Transfer-Encoding', 'Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'],
  ])('refuses %s with 400 JSON and closes the connection; the service never sees it', async (_name, tail) => {
    const before = await serviceRequests();
    const { text, closed } = await raw(gwA.port, (s) => s.write(`POST /track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${tail}`), 2_000);
    expect(parseAnswer(text)).toMatchObject({ status: 400, body: { error: 'bad_request' } });
    expect(closed).toBe(true);
    expect(await serviceRequests()).toBe(before);
  });

  it.each([
    ['one 100 KB header', `X-Big: ${'a'.repeat(100_000)}\r\n`],
    ['25 headers of 4 KB', Array.from({ length: 25 }, (_, i) => `X-H${i}: ${'a'.repeat(4000)}\r\n`).join('')],
  ])('refuses %s with 431 JSON; the service never sees it', async (_name, headers) => {
    const before = await serviceRequests();
    const { text } = await raw(
      gwA.port,
      (s) => s.write(`POST /track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${headers}Content-Length: 2\r\n\r\n[]`),
      2_000,
    );
    expect(parseAnswer(text)).toMatchObject({ status: 431, body: { error: 'request_header_too_large' } });
    expect(await serviceRequests()).toBe(before);
  });

  it('does not serve /metrics or the probes on the public listener', async () => {
    for (const path of ['/metrics', '/readyz', '/healthz']) {
      const r = await send(gwA.url, { method: 'GET', path });
      expect([path, r.status, r.body]).toEqual([path, 404, { error: 'not_found', message: 'no such path; POST /track takes track points' }]);
    }
    expect((await fetch(`${svc.url}/metrics`)).status).toBe(200);
  });

  it('answers a client asking for its internal paths 404 JSON, with an Idempotency-Key or without, and the service never sees it', async () => {
    const before = await serviceRequests();
    for (const path of ['/_track_keyed', '/_gateway/502', '/_gateway/keyed/413']) {
      const variants: Record<string, string>[] = [{}, { 'Idempotency-Key': `"internal-${path}"` }];
      for (const headers of variants) {
        const r = await send(gwA.url, { path, body: '[]', headers });
        expect([path, headers, r.status, r.body]).toEqual([
          path,
          headers,
          404,
          { error: 'not_found', message: 'no such path; POST /track takes track points' },
        ]);
      }
    }
    expect(await serviceRequests()).toBe(before);
  });
});

/**
 * `n` requests, alternating between the gateways, one every `gapMs`: each instance gets fewer than one
 * request per sync interval, so the limit holds within its stated bound (what the other instance
 * admitted since this one's last sync: at most one request here).
 */
async function paced(gateways: Gateway[], apiKey: string, n: number, gapMs: number, headers: Record<string, string> = {}): Promise<Answer[]> {
  const answers: Answer[] = [];
  for (let i = 0; i < n; i++) {
    answers.push(await send(gateways[i % gateways.length]!.url, { body: '[]', headers: json(apiKey, headers) }));
    await new Promise((r) => setTimeout(r, gapMs));
  }
  return answers;
}

describe('API keys', () => {
  it('refuses a request without X-Api-Key, and one with a key it does not know, with 401 JSON; the service sees neither', async () => {
    const before = await serviceRequests();
    const none = await send(gwA.url, { body: '[]', headers: { 'content-type': 'application/json' } });
    expect([none.status, none.body]).toEqual([401, { error: 'api_key_required', message: "send the fleet's API key in X-Api-Key" }]);
    expect(none.contentType).toBe('application/json');
    // The dodge of issue 32: a new key on every request opened a fresh bucket each time (50 × 202).
    await startOfSecond();
    const invented = await Promise.all(Array.from({ length: 50 }, () => send(gwA.url, { body: '[]', headers: json(`tk_${randomUUID()}`) })));
    expect(tally(invented)).toEqual({ 401: 50 });
    expect(invented[0]!.body).toEqual({ error: 'api_key_invalid', message: 'this X-Api-Key is unknown or revoked' });
    expect(await serviceRequests()).toBe(before);
  });

  it('serves a key on every instance that shares the Redis, and refuses it within GATEWAY_KEY_CACHE_S once revoked', async () => {
    const name = `revoked-${run}`;
    const key = await addApiKey(gwA.redisUrl, name, 0);
    for (const gw of [gwA, gwB]) expect((await send(gw.url, { body: '[]', headers: json(key) })).status).toBe(202);
    await gatewayKeys(gwA.redisUrl, ['revoke', name]);
    const revoked = Date.now();
    for (const gw of [gwA, gwB]) {
      await until('the revoked key refused', async () => (await send(gw.url, { body: '[]', headers: json(key) })).status === 401, 5_000);
    }
    expect(Date.now() - revoked).toBeLessThan((KEY_CACHE_S + 1) * 1000);
    expect(await gatewayKeys(gwA.redisUrl, ['list'])).not.toContain(name);
  });

  it("names the key to the service (X-Api-Key-Name, a client's own replaced) and the client's address (X-Forwarded-For): a refused request is kept with both", async () => {
    const name = `named-${run}`;
    const key = await addApiKey(gwA.redisUrl, name, 0);
    const bad = JSON.stringify([point('MSKU-gw', { lat: 95 })]);
    const answers = [
      await send(gwA.url, { body: bad, headers: json(key, { 'x-api-key-name': 'forged' }) }),
      await send(gwB.url, { body: bad, headers: json(key, { 'x-forwarded-for': '203.0.113.9' }) }),
    ];
    expect(answers.map((a) => a.status)).toEqual([400, 400]);
    // Other tests of this file send refused requests too: these two are the ones keyed MSKU-gw.
    const kept = (await consumeAll(refusedTopic, { expected: 2, partitions: 1 })).filter((m) => m.key === 'MSKU-gw');
    expect(kept.map((m) => [m.key, m.headers['client.api_key_name'], m.headers['client.address']])).toEqual([
      ['MSKU-gw', name, '127.0.0.1'],
      ['MSKU-gw', name, '127.0.0.1'],
    ]);
  });

  it('stores each key as its SHA-256 with its name and limit, never the key itself', async () => {
    const key = await newKey(7);
    const cli = async (...args: string[]) => (await promisify(execFile)('redis-cli', ['-u', gwA.redisUrl, '--no-auth-warning', ...args])).stdout;
    const hash = createHash('sha256').update(key).digest('hex');
    expect((await cli('HGET', `gw:apikey:${hash}`, 'limit')).trim()).toBe('7');
    const stored = (await cli('--scan', '--pattern', 'gw:*')).split('\n').filter(Boolean);
    expect(stored.length).toBeGreaterThan(1);
    for (const name of stored) {
      expect(name).not.toContain(key);
      expect(await cli('HGETALL', name)).not.toContain(key);
    }
  });
});

describe("Idempotency-Key: a client's retries answered once", () => {
  const cli = async (...args: string[]) => (await promisify(execFile)('redis-cli', ['-u', gwA.redisUrl, '--no-auth-warning', ...args])).stdout.trim();
  const withKey = (idem: string, extra: Record<string, string> = {}) => json(anyKey, { 'idempotency-key': idem, ...extra });
  const sha = (text: string) => createHash('sha256').update(text).digest('hex');
  /** Where the gateways keep an Idempotency-Key of anyKey's client: its bucket (the API key's SHA-256), the key's SHA-256. */
  const keptAt = (idem: string) => `gw:idem:k:${sha(anyKey)}:${sha(idem)}`;
  /** This run's points of one container in the topic. */
  const inKafka = async (container: string, expected: number) =>
    (await consumeAll(topic, { expected, idleMs: 1_500 })).filter((m) => m.key === container).length;

  it('the first request is passed on; its retries, through either instance, get its 202 again (Idempotent-Replayed) and the service sees none', async () => {
    const container = `${run}-idem-retry`;
    const body = JSON.stringify([point(container), point(container, { lat: 2 })]);
    const before = await serviceRequests();
    // The draft's form, a quoted string, and the bare one: the same key.
    const quoted = randomUUID();
    expect(await send(gwA.url, { body, headers: withKey(`"${quoted}"`) })).toMatchObject({ status: 202, body: { accepted: 2 }, replayed: null });
    expect(await send(gwB.url, { body, headers: withKey(quoted) })).toMatchObject({ status: 202, body: { accepted: 2 }, replayed: 'true' });
    const idem = randomUUID();
    const answers = [
      await send(gwA.url, { body, headers: withKey(idem) }),
      await send(gwA.url, { body, headers: withKey(idem) }),
      await send(gwB.url, { body, headers: withKey(idem) }),
    ];
    expect(answers.map((a) => [a.status, a.body, a.replayed])).toEqual([
      [202, { accepted: 2 }, null],
      [202, { accepted: 2 }, 'true'],
      [202, { accepted: 2 }, 'true'],
    ]);
    await until('the service to count the requests', async () => (await serviceRequests()) >= before + 2, 5_000);
    expect((await serviceRequests()) - before).toBe(2);
    expect(await inKafka(container, 4)).toBe(4); // two keys, two points each, once
  });

  it('the same key with another body gets 422; a key still in flight (another instance answering it) gets 409 with Retry-After', async () => {
    const idem = randomUUID();
    expect((await send(gwA.url, { body: JSON.stringify([point(`${run}-idem-a`)]), headers: withKey(idem) })).status).toBe(202);
    const other = await send(gwB.url, { body: JSON.stringify([point(`${run}-idem-b`)]), headers: withKey(idem) });
    expect([other.status, (other.body as { error: string }).error]).toEqual([422, 'idempotency_key_reused']);

    // A request that another instance is still answering: its key is kept in flight, with its body's fingerprint.
    const body = JSON.stringify([point(`${run}-idem-flight`)]);
    const busy = randomUUID();
    await cli('SET', keptAt(busy), `p ${sha(body)}`, 'EX', '60');
    const inFlight = await send(gwA.url, { body, headers: withKey(busy) });
    expect([inFlight.status, (inFlight.body as { error: string }).error, inFlight.retryAfter]).toEqual([409, 'idempotency_key_in_flight', '1']);
  });

  it('an answer other than 202 releases the key: the retry is passed on again; a bad key is refused with 400', async () => {
    const idem = randomUUID();
    const invalid = JSON.stringify([point(`${run}-idem-bad`, { lat: 95 })]);
    const before = await serviceRequests();
    expect((await send(gwA.url, { body: invalid, headers: withKey(idem) })).status).toBe(400);
    await until('the release of the key', async () => (await cli('EXISTS', keptAt(idem))) === '0', 5_000);
    const again = await send(gwB.url, { body: invalid, headers: withKey(idem) });
    expect([again.status, again.replayed]).toEqual([400, null]);
    await until('the service to count the requests', async () => (await serviceRequests()) >= before + 2, 5_000);
    for (const bad of ['', 'x'.repeat(256), 'caf\u00e9']) {
      const answer = await send(gwA.url, { body: '[]', headers: json(anyKey, { 'idempotency-key': bad }) });
      expect([bad.length, answer.status, (answer.body as { error: string }).error]).toEqual([bad.length, 400, 'idempotency_key_invalid']);
    }
  });

  it('a device that loses its connection before the 202 and sends again gets the 202 it missed (replayed): its points in Kafka once', async () => {
    const container = `${run}-idem-lost`;
    const body = JSON.stringify([point(container)]);
    const idem = randomUUID();
    // The request written whole, the connection closed at once: nginx still takes the service's answer.
    await new Promise<void>((resolve) => {
      const socket = connectTcp(gwA.port, '127.0.0.1', () => {
        socket.end(
          `POST /track HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nX-Api-Key: ${anyKey}\r\nIdempotency-Key: ${idem}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
          () => {
            socket.destroy();
            resolve();
          },
        );
      });
    });
    // The retry comes once the lost request reached the gateway (its key is kept): sent sooner, it could
    // overtake the lost one on the other instance and be the first, answered 202 without a replay.
    await until("gateway A to keep the lost request's key", async () => (await cli('EXISTS', keptAt(idem))) === '1', 5_000);
    let answer = await send(gwB.url, { body, headers: withKey(idem) });
    const deadline = Date.now() + 5_000;
    while (answer.status === 409 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, Number(answer.retryAfter ?? '1') * 100));
      answer = await send(gwB.url, { body, headers: withKey(idem) });
    }
    expect([answer.status, answer.body, answer.replayed]).toEqual([202, { accepted: 1 }, 'true']);
    expect(await inKafka(container, 1)).toBe(1);
  });

  it("while Redis is full (maxmemory reached, noeviction), keyed requests are passed on unchecked and Redis's refusal logged; once it has room, keys are checked again", async () => {
    const container = `${run}-idem-full`;
    const body = JSON.stringify([point(container)]);
    // Redis's default policy, noeviction: every write that needs memory is refused with an OOM error.
    const from = gwA.output.length;
    await cli('CONFIG', 'SET', 'maxmemory', '1');
    try {
      const idem = randomUUID();
      const [first, retry] = [await send(gwA.url, { body, headers: withKey(idem) }), await send(gwB.url, { body, headers: withKey(idem) })];
      expect([first.status, first.replayed, retry.status, retry.replayed]).toEqual([202, null, 202, null]);
      expect(loggedSince(gwA, from)).toMatch(/OOM command not allowed/);
    } finally {
      await cli('CONFIG', 'SET', 'maxmemory', '0');
    }
    // Both were written: without its key the retry is a new request (deploy/gateway/README.md, "Sizing Redis for the keys").
    expect(await inKafka(container, 2)).toBe(2);
    await until(
      'keys checked again',
      async () => {
        const idem = randomUUID();
        const checked = JSON.stringify([point(`${run}-idem-room`)]);
        const [once, again] = [await send(gwA.url, { body: checked, headers: withKey(idem) }), await send(gwB.url, { body: checked, headers: withKey(idem) })];
        return once.status === 202 && again.replayed === 'true';
      },
      10_000,
    );
  });

  it(
    '2,000 requests, each sent 3 times with its key through two instances, some while the first is in flight: every point in Kafka once; answers 202, replayed 202 or 409',
    { timeout: 120_000 },
    async () => {
      const n = 2_000;
      const statuses: Record<string, number> = {};
      const count = (a: Answer) => {
        const label = a.status === 202 && a.replayed === 'true' ? '202 replayed' : String(a.status);
        statuses[label] = (statuses[label] ?? 0) + 1;
      };
      const one = async (i: number) => {
        const idem = randomUUID();
        const body = JSON.stringify([point(`${run}-idem-many-${i}`)]);
        const send3 = () => send(i % 2 === 0 ? gwB.url : gwA.url, { body, headers: withKey(idem) });
        // The first and a retry at once (one of them in flight while the other arrives), then a late retry.
        const [a, b] = await Promise.all([send(gwA.url, { body, headers: withKey(idem) }), send(gwB.url, { body, headers: withKey(idem) })]);
        const c = await send3();
        for (const x of [a, b, c]) count(x);
      };
      for (let i = 0; i < n; i += 50) await Promise.all(Array.from({ length: Math.min(50, n - i) }, (_, k) => one(i + k)));
      console.log(`Idempotency-Key, ${n} requests × 3 through two gateway instances: ${JSON.stringify(statuses)}`);
      expect(Object.keys(statuses).every((s) => ['202', '202 replayed', '409'].includes(s))).toBe(true);
      // A send that finds the first in flight looks again 20 ms later (the gateway writes kept answers
      // every 5 ms) and mostly gets the replay then; 409 only when the first is still being answered.
      expect(statuses['202']).toBe(n);
      const messages = (await consumeAll(topic, { expected: n, idleMs: 2_000, timeoutMs: 60_000 })).filter((m) => m.key.startsWith(`${run}-idem-many-`));
      expect(messages.length).toBe(n);
      expect(new Set(messages.map((m) => m.key)).size).toBe(n);
    },
  );
});

describe('rate limit, counted locally and shared through Redis', () => {
  it("answers 429 with Retry-After and a JSON body past the key's limit, for that key only; each key has its own limit", async () => {
    const [busy, small, other] = [await newKey(), await newKey(5), await newKey()];
    await startOfSecond();
    const [answers, smalls, others] = await Promise.all([burst(gwA.url, busy, RATE_LIMIT + 10), burst(gwA.url, small, 10), burst(gwA.url, other, 5)]);
    expect(tally(answers)).toEqual({ 202: RATE_LIMIT, 429: 10 });
    expect(tally(smalls)).toEqual({ 202: 5, 429: 5 });
    expect(tally(others)).toEqual({ 202: 5 });
    const refused = answers.find((a) => a.status === 429)!;
    expect(refused).toMatchObject({ retryAfter: '1', contentType: 'application/json', body: { error: 'rate_limited' } });
    // The next second is a new window.
    await startOfSecond();
    expect(tally(await burst(gwA.url, busy, 5))).toEqual({ 202: 5 });
  });

  it('two gateway instances share one limit through Redis, within one sync interval of each other', async () => {
    const key = await newKey();
    await startOfSecond();
    // 30 requests within about 0.6 s, alternating instances: 20 accepted, at most one more per instance.
    const answers = await paced([gwA, gwB], key, 30, 15);
    const accepted = tally(answers)[202] ?? 0;
    expect(accepted).toBeGreaterThanOrEqual(RATE_LIMIT);
    expect(accepted).toBeLessThanOrEqual(RATE_LIMIT + 2);
    expect(tally(answers)[429]).toBe(30 - accepted);
  });

  it("the nginx workers of one instance share its limit (one of them syncs the instance's counts with Redis)", async () => {
    const gw = await startGateway({ upstream: `127.0.0.1:${svc.port}`, env: { GATEWAY_WORKERS: '2' }, redisUrl: gwA.redisUrl });
    try {
      const key = await newKey();
      await startOfSecond();
      // A new connection for each request, so that both workers take some: 30 within about 0.6 s.
      const answers = await paced([gw], key, 30, 15, { connection: 'close' });
      const accepted = tally(answers)[202] ?? 0;
      expect(accepted).toBeGreaterThanOrEqual(RATE_LIMIT);
      expect(accepted).toBeLessThanOrEqual(RATE_LIMIT + 2);
    } finally {
      await gw.stop();
    }
  });

  it('counts every request in Redis with GATEWAY_RATE_LIMIT_SYNC_MS=0: exact across instances, even in a burst', async () => {
    const env = { GATEWAY_RATE_LIMIT: String(RATE_LIMIT), GATEWAY_RATE_LIMIT_SYNC_MS: '0' };
    const [x, y] = [
      await startGateway({ upstream: `127.0.0.1:${svc.port}`, env, redisUrl: gwA.redisUrl }),
      await startGateway({ upstream: `127.0.0.1:${svc.port}`, env, redisUrl: gwA.redisUrl }),
    ];
    try {
      const key = await newKey();
      await startOfSecond();
      const answers = (await Promise.all([burst(x.url, key, 15), burst(y.url, key, 15)])).flat();
      expect(tally(answers)).toEqual({ 202: RATE_LIMIT, 429: 30 - RATE_LIMIT });
    } finally {
      await Promise.all([x.stop(), y.stop()]);
    }
  });

  it('with GATEWAY_API_KEYS=off limits by the client address, whatever X-Api-Key or X-Forwarded-For say', async () => {
    const gw = await startGateway({ upstream: `127.0.0.1:${svc.port}`, env: { GATEWAY_RATE_LIMIT: '5', GATEWAY_API_KEYS: 'off' }, redisUrl: gwA.redisUrl });
    try {
      for (const headers of [
        () => ({ 'content-type': 'application/json' }),
        () => json(randomUUID()),
        () => ({ 'content-type': 'application/json', 'x-forwarded-for': `10.0.${Math.floor(Math.random() * 250)}.${Math.floor(Math.random() * 250)}` }),
      ]) {
        await startOfSecond();
        const answers = await Promise.all(Array.from({ length: 50 }, () => send(gw.url, { body: '[]', headers: headers() })));
        expect(tally(answers)).toEqual({ 202: 5, 429: 45 });
      }
    } finally {
      await gw.stop();
    }
  });

  it('while Redis is down each instance limits on its own, keeps serving known keys and passes keyed requests on unchecked; once it is back, one limit again and keys checked again', async () => {
    const redisPort = Number(new URL(gwA.redisUrl).port);
    const key = await newKey();
    // Looked up before the outage: each gateway keeps its last answer while Redis is away.
    for (const gw of [gwA, gwB]) expect((await send(gw.url, { body: '[]', headers: json(key) })).status).toBe(202);
    // A snapshot for the Redis started again below (gateway.sh's saves every minute).
    await promisify(execFile)('redis-cli', ['-u', gwA.redisUrl, 'SAVE']);
    // Only what the gateways log from here on: the test of a full Redis logged both changes already.
    const down = [gwA.output.length, gwB.output.length];
    process.kill(gwA.redisPid()!, 'SIGKILL');
    await until('both gateways noticed', async () => {
      await Promise.all([send(gwA.url, { body: '[]', headers: json(key) }), send(gwB.url, { body: '[]', headers: json(key) })]);
      return [gwA, gwB].every((gw, i) =>
        /rate limit: redis:\/\/127\.0\.0\.1:\d+ cannot be reached .*counting per gateway instance/.test(loggedSince(gw, down[i]!)),
      );
    });
    await startOfSecond();
    const [a, b] = await Promise.all([burst(gwA.url, key, 30), burst(gwB.url, key, 30)]);
    expect([tally(a), tally(b)]).toEqual([
      { 202: RATE_LIMIT, 429: 10 },
      { 202: RATE_LIMIT, 429: 10 },
    ]);
    // An Idempotency-Key cannot be checked: the request and its retry are passed on, neither held back.
    const unchecked = randomUUID();
    const keyed = { body: JSON.stringify([point(`${run}-idem-unchecked`)]), headers: json(anyKey, { 'idempotency-key': unchecked }) };
    const [first, retry] = [await send(gwA.url, keyed), await send(gwA.url, keyed)];
    expect([first.status, first.replayed, retry.status, retry.replayed]).toEqual([202, null, 202, null]);

    // Started again from its snapshot in the run directory: the keys are still there.
    const up = [gwA.output.length, gwB.output.length];
    const redis = spawn('redis-server', ['--bind', '127.0.0.1', '--port', String(redisPort), '--save', '', '--appendonly', 'no', '--dir', gwA.runDir], {
      stdio: 'ignore',
    });
    try {
      // Redis is tried again a second after a failure.
      await until('both gateways count in Redis again', async () => {
        await send(gwA.url, { body: '[]', headers: json(key) });
        await send(gwB.url, { body: '[]', headers: json(key) });
        return [gwA, gwB].every((gw, i) => /answers again/.test(loggedSince(gw, up[i]!)));
      });
      await startOfSecond();
      const answers = await paced([gwA, gwB], key, 30, 15);
      const accepted = tally(answers)[202] ?? 0;
      expect(accepted).toBeGreaterThanOrEqual(RATE_LIMIT);
      expect(accepted).toBeLessThanOrEqual(RATE_LIMIT + 2);
      // Keys are checked again: a retry through the other instance gets the first answer.
      const checked = { body: JSON.stringify([point(`${run}-idem-checked`)]), headers: json(anyKey, { 'idempotency-key': randomUUID() }) };
      const [once, again] = [await send(gwA.url, checked), await send(gwB.url, checked)];
      expect([once.status, once.replayed, again.status, again.replayed]).toEqual([202, null, 202, 'true']);
    } finally {
      redis.kill('SIGTERM');
    }
  });
});

describe('while the service or the broker is away', () => {
  it("passes the service's 500 and Retry-After through, then answers 502 JSON with Retry-After once the service is gone", async () => {
    // A service whose broker cannot be reached: it serves, and refuses points with 500.
    const noBroker = await startService({ MQ_BROKERS: `127.0.0.1:${await freePort()}`, BROKER_DOWN_GRACE_MS: '200' }, { waitFor: 'healthy' });
    const gw = await startGateway({
      upstream: `127.0.0.1:${noBroker.port}`,
      redisUrl: 'redis://127.0.0.1:1',
      env: { GATEWAY_RATE_LIMIT: '0', GATEWAY_API_KEYS: 'off' },
    });
    try {
      const req = { body: JSON.stringify([point('away')]), headers: json(anyKey) };
      const direct = await send(noBroker.url, req);
      expect([direct.status, direct.retryAfter, (direct.body as { error: string }).error]).toEqual([500, '1', 'broker_unavailable']);
      expect(await send(gw.url, req)).toEqual(direct);

      await noBroker.stop('SIGKILL');
      const r = await send(gw.url, req);
      expect([r.status, r.retryAfter, r.body]).toEqual([502, '1', { error: 'service_unreachable', message: 'the ingestion service cannot be reached; retry' }]);
    } finally {
      await gw.stop();
      await noBroker.stop();
    }
  });
});

describe('the keep-alive race and the image', () => {
  it(
    "the service closes an idle connection after its uWebSockets.js build's idle timeout (v20.30: 8 to 12 s, v20.57: 28 to 32 s; uSockets ticks every 4 s), and the gateway closes its idle upstream connections sooner than any build",
    { timeout: 60_000 },
    async () => {
      const HTTP_IDLE_CLOSE_S = idleCloseS(uwsBuild().idleTimeoutS);
      const opened = Date.now();
      const { closed } = await raw(
        svc.port,
        (s) => s.write('POST /track HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]'),
        (HTTP_IDLE_CLOSE_S.latest + 5) * 1000,
      );
      const idleS = (Date.now() - opened) / 1000;
      expect(closed).toBe(true);
      expect(idleS).toBeGreaterThan(HTTP_IDLE_CLOSE_S.earliest - 0.5);
      expect(idleS).toBeLessThan(HTTP_IDLE_CLOSE_S.latest + 1.5);
      const conf = readFileSync(`${gwA.runDir}/nginx.conf`, 'utf8');
      const upstreamIdle = Number(/upstream track_ingest \{[^}]*keepalive_timeout (\d+)s;/.exec(conf)?.[1]);
      expect(upstreamIdle).toBeLessThan(EARLIEST_IDLE_CLOSE_S);
    },
  );

  it("the gateway image's files (what deploy/gateway/Dockerfile copies) render a configuration nginx accepts", async () => {
    const dockerfile = readFileSync(new URL('../../deploy/gateway/Dockerfile', import.meta.url), 'utf8');
    const image = mkdtempSync(join(tmpdir(), 'gateway-image-'));
    // COPY as Docker does it: a directory's contents into the target, files into the target directory.
    for (const [, sources, target] of dockerfile.matchAll(/^COPY (.+) (\S+)$/gm)) {
      for (const source of sources!.split(' ')) {
        const from = fileURLToPath(new URL(`../../${source}`, import.meta.url));
        const to = statSync(from).isDirectory() ? join(image, target!) : join(image, target!, basename(source));
        cpSync(from, to, { recursive: true });
      }
    }
    const envBlock = /^ENV ((?:.*\\\n)*.*)$/m.exec(dockerfile)?.[1] ?? '';
    const env = Object.fromEntries([...envBlock.matchAll(/(\w+)=(\S+)/g)].map((m) => [m[1]!, m[2]!]));
    expect(Object.keys(env)).toContain('UPSTREAM_ADDR');
    // The name `ingest` resolves in compose only: here the upstream is this test's service.
    const imageEnv = { ...process.env, ...env, GATEWAY_RUN_DIR: join(image, 'run'), UPSTREAM_ADDR: `127.0.0.1:${svc.port}` };
    const { stdout } = await promisify(execFile)('bash', [join(image, 'scripts/gateway.sh'), 'render'], { env: imageEnv });
    expect(stdout.trim()).toBe(join(image, 'run/nginx.conf'));
    // Through a pipe, as Docker gives it: the image logs to /dev/stdout, which nginx cannot open on a
    // socket (what Node gives a child for its output).
    const check = await promisify(execFile)('bash', ['-c', 'nginx -t -p "$1" -c "$2" 2>&1 | cat', '-', join(image, 'run'), stdout.trim()], { env: imageEnv });
    expect(check.stdout).toMatch(/test is successful/);
  });
});

function byKey(a: Record<string, unknown>, b: Record<string, unknown>): number {
  return JSON.stringify(a) < JSON.stringify(b) ? -1 : 1;
}
