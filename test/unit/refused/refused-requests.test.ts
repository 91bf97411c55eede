// What the refused-requests topic receives for one refused request (the message's key, value and
// headers), and what the rate lets through; the producer is replaced at its seam (RefusedSender).
// test/integration/refused-topic.test.ts sends the same through a real service and broker.
import { gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import type { RefusedMessage } from '../../../src/kafka/refused-producer.js';
import { firstContainerId, RefusedRequests, type Dropped, type RefusedRequest } from '../../../src/refused/refused-requests.js';

const client = { address: '192.0.2.7', apiKeyName: 'fleet-a' };
const bad = Buffer.from('[{"container_id":"MSKU\\u00e91","lat":91,"lon":0,"timestamp":"x"}]');

function request(over: Partial<RefusedRequest> = {}): RefusedRequest {
  return {
    code: 'validation_failed',
    status: 400,
    message: '1 invalid track point',
    details: [{ index: 0, field: 'lat', message: 'must be at most 90' }],
    received: bad,
    decoded: null,
    gzipped: false,
    partial: false,
    sentBytes: bad.byteLength,
    contentType: '',
    contentEncoding: '',
    client,
    ...over,
  };
}

function keeper(opts: { rate?: number; maxBytes?: number; refuse?: 'queue_full' | 'unavailable' } = {}) {
  const sent: RefusedMessage[] = [];
  const dropped: Dropped[] = [];
  let now = 0;
  const k = new RefusedRequests(
    { topic: 'refused', ratePerSecond: opts.rate ?? 10, maxBytes: opts.maxBytes ?? 1024, idleMs: 30_000 },
    {
      send: (m) => {
        if (opts.refuse !== undefined) return opts.refuse;
        sent.push(m);
        return null;
      },
    },
    'host/0',
    (reason) => dropped.push(reason),
    () => now,
  );
  return { k, sent, dropped, advance: (ms: number) => void (now += ms) };
}

const header = (m: RefusedMessage, name: string): string | undefined => m.headers.find((h) => name in h)?.[name];
const until = async (done: () => boolean) => {
  for (let i = 0; i < 200 && !done(); i++) await new Promise((r) => setTimeout(r, 5));
};

describe('the message of a refused request', () => {
  it('holds the body as received, keyed by its first container_id, with the answer, the client and the sizes in its headers', () => {
    const { k, sent } = keeper();
    k.keep(request());
    const m = sent[0]!;
    expect(m.key).toBe('MSKUé1');
    expect(m.value.toString()).toBe(bad.toString());
    expect(Object.assign({}, ...m.headers)).toMatchObject({
      'refused.code': 'validation_failed',
      'refused.status': '400',
      'refused.message': '1 invalid track point',
      'client.address': '192.0.2.7',
      'client.api_key_name': 'fleet-a',
      'body.sent_bytes': String(bad.byteLength),
      'body.kept': 'whole',
      'service.instance': 'host/0',
    });
    expect(JSON.parse(header(m, 'refused.details')!)).toEqual([{ index: 0, field: 'lat', message: 'must be at most 90' }]);
    expect(Date.parse(header(m, 'refused.at')!)).toBeGreaterThan(Date.now() - 60_000);
  });

  it('copies the body before keep() returns: the caller may reuse its memory (uWS does)', () => {
    const { k, sent } = keeper();
    const reused = Buffer.from(bad);
    k.keep(request({ received: reused }));
    reused.fill(0);
    expect(sent[0]!.value.toString()).toBe(bad.toString());
  });

  it('cuts the body to MQ_REFUSED_MAX_BYTES and says so', () => {
    const { k, sent } = keeper({ maxBytes: 20 });
    k.keep(request());
    expect(sent[0]!.value.toString()).toBe(bad.subarray(0, 20).toString());
    expect(header(sent[0]!, 'body.kept')).toBe(`cut to 20 of ${bad.byteLength} bytes (MQ_REFUSED_MAX_BYTES=20)`);
  });

  it('keeps a gzip body decompressed: the inflated bytes when the edge had them, else inflated here up to the cut', async () => {
    const zipped = gzipSync(bad);
    const { k, sent } = keeper({ maxBytes: 30 });
    k.keep(request({ received: zipped, decoded: bad, gzipped: true, contentEncoding: 'gzip', sentBytes: zipped.byteLength }));
    k.keep(request({ code: 'payload_too_large', status: 413, received: zipped, gzipped: true, sentBytes: zipped.byteLength }));
    await until(() => sent.length === 2);
    for (const m of sent) expect(m.value.toString()).toBe(bad.subarray(0, 30).toString());
    expect(header(sent[0]!, 'body.bytes')).toBe(String(bad.byteLength));
    expect(header(sent[1]!, 'body.kept')).toBe('cut to 30 bytes (MQ_REFUSED_MAX_BYTES=30)');
  });

  it('keeps gzip that cannot be inflated as it was received, and says why', async () => {
    const { k, sent } = keeper();
    k.keep(request({ code: 'invalid_json', received: Buffer.from('not gzip at all'), gzipped: true }));
    await until(() => sent.length === 1);
    expect([sent[0]!.value.toString(), header(sent[0]!, 'body.kept')]).toEqual(['not gzip at all', 'as received, 15 bytes: not valid gzip']);
  });

  it('of a request refused from its headers: no body, no key, the headers that were refused', () => {
    const { k, sent } = keeper();
    k.keep(request({ code: 'unsupported_media_type', status: 415, received: null, contentType: 'text/csv', sentBytes: 1234 }));
    const m = sent[0]!;
    expect([m.key, m.value.byteLength, header(m, 'content.type'), header(m, 'body.sent_bytes'), header(m, 'body.kept')]).toEqual([
      null,
      0,
      'text/csv',
      '1234',
      'none: refused from its headers, the body was not read',
    ]);
  });

  it('says when the body was not read to its end', () => {
    const { k, sent } = keeper();
    k.keep(request({ code: 'payload_too_large', status: 413, partial: true, sentBytes: null }));
    expect(header(sent[0]!, 'body.kept')).toBe(`the first ${bad.byteLength} of ${bad.byteLength} bytes read: the rest was not read (over MAX_BODY_BYTES)`);
  });
});

describe('the rate of refused requests kept', () => {
  it('writes at most MQ_REFUSED_RATE a second, as many at once, and counts the rest as over_rate', () => {
    const { k, sent, dropped, advance } = keeper({ rate: 10 });
    const offer = () => k.admit() && void k.keep(request());
    for (let i = 0; i < 25; i++) offer();
    expect([sent.length, dropped.length]).toEqual([10, 15]);
    advance(500);
    for (let i = 0; i < 25; i++) offer();
    expect([sent.length, dropped.length]).toEqual([15, 35]);
    expect(new Set(dropped)).toEqual(new Set(['over_rate']));
  });

  it('counts what the producer refuses, by its reason', () => {
    const { k, dropped } = keeper({ refuse: 'queue_full' });
    k.keep(request());
    expect(dropped).toEqual(['queue_full']);
  });
});

describe('the first container_id of a body', () => {
  it('is read from any text, JSON or not, escapes decoded', () => {
    expect(firstContainerId(Buffer.from('[{"lat":1, "container_id" : "A\\"B"}, {"container_id":"C"}]'))).toBe('A"B');
    expect(firstContainerId(Buffer.from('[{"container_id":"X1","lat":'))).toBe('X1');
    expect(firstContainerId(Buffer.from('{"device":"X1"}'))).toBeNull();
    expect(firstContainerId(Buffer.from(`[{"container_id":"${'z'.repeat(300)}"}]`))).toBeNull();
  });
});
