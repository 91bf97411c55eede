// The binding's patch (patches/kafka-javascript-produce-batch.patch) on its own, against the real
// broker: Producer#produceBatch with the service's producer settings, read back with a consumer.
import Kafka from '@confluentinc/kafka-javascript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { producerSettings } from '../../src/kafka/settings.js';
import { encodePoints } from '../../src/track-point/encode.js';
import { messagesOf } from '../../support/messages.js';
import { validatePoints, type TrackPoint } from '../../src/track-point/schema.js';
import { singlePass } from '../../src/track-point/single-pass.js';
import { BROKERS, consumeAll } from '../../support/kafka.js';
import { javaPartition } from '../helpers/murmur2.js';
import { fileTopic } from '../helpers/topic.js';

const PARTITIONS = 6;
const topic = fileTopic('produce-batch', PARTITIONS);
const otherTopic = fileTopic('produce-batch-other', PARTITIONS);

interface Report {
  err: Kafka.LibrdKafkaError | null;
  report: Kafka.DeliveryReport;
}

/** A producer with the service's settings, a delivery report for every message (to watch opaques). */
async function connect(): Promise<{ producer: Kafka.Producer; reports: Report[] }> {
  const config = loadConfig({ MQ_BROKERS: BROKERS, MQ_TOPIC: topic, ACK_MODE: 'delivered' });
  const settings = producerSettings(config, 'produce-batch-test');
  const producer = new Kafka.Producer(settings.global, settings.topic);
  const reports: Report[] = [];
  producer.on('delivery-report', (err, report) => reports.push({ err, report }));
  producer.setPollInterval(10);
  await connectProducer(producer);
  return { producer, reports };
}

const connectProducer = (producer: Kafka.Producer) => new Promise<void>((resolve, reject) => producer.connect({}, (err) => (err ? reject(err) : resolve())));
const disconnect = (producer: Kafka.Producer) => new Promise<void>((resolve) => producer.disconnect(() => resolve()));

const flush = (producer: Kafka.Producer) => new Promise<void>((resolve, reject) => producer.flush(10_000, (err) => (err ? reject(err) : resolve())));

async function until(condition: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const point = (container_id: string, lat: number): TrackPoint => ({ container_id, lat, lon: 4.4, timestamp: '2024-05-01T12:00:00Z', speed: 1 });

let producer: Kafka.Producer;
let reports: Report[];
beforeAll(async () => {
  ({ producer, reports } = await connect());
});
afterAll(async () => {
  await disconnect(producer);
});

describe('Producer#produceBatch (patched into the binding)', () => {
  it("writes every message with its own key and value, the time of the call, on the Java partitioner's partition", async () => {
    const ids = ['MSCU1234567', '集装箱-7', 'a"quoted\\id', 'конт-9', 'x'];
    const points = Array.from({ length: 50 }, (_, i) => point(ids[i % ids.length]!, i));
    const batch = encodePoints(points);
    const ticket = { name: 'request 1' };
    const before = Date.now();
    expect(producer.produceBatch(topic, batch.data, batch.messages, ticket)).toBe(50);
    const after = Date.now();
    await flush(producer);
    await until(() => reports.length === 50, '50 delivery reports');
    // Every message reports with the opaque it was given; none failed.
    expect(reports.filter((r) => r.err !== null)).toEqual([]);
    expect(reports.filter((r) => r.report.opaque !== ticket).map((r) => r.report.opaque)).toEqual([]);

    const got = await consumeAll(topic, { expected: 50, partitions: PARTITIONS });
    expect(got).toHaveLength(50);
    for (const m of got) expect(m.partition).toBe(javaPartition(m.key, PARTITIONS));
    // One timestamp for the call, librdkafka's clock as it enqueued them: the time of acceptance.
    const timestamps = new Set(got.map((m) => m.timestamp));
    expect(timestamps.size).toBe(1);
    const [stamped] = timestamps;
    expect(stamped).toBeGreaterThanOrEqual(before);
    expect(stamped).toBeLessThanOrEqual(after);
    // Per key, the values in the order they were in the batch.
    const sorted = [...got].sort((a, b) => a.partition - b.partition || a.offset - b.offset);
    for (const id of ids) {
      const values = sorted.filter((m) => m.key === id).map((m) => JSON.parse(m.value) as TrackPoint);
      expect(values).toEqual(points.filter((p) => p.container_id === id));
    }
  });

  it('throws on malformed arguments before enqueuing anything', async () => {
    reports.length = 0;
    const batch = encodePoints([point('a', 1), point('b', 2)]);
    const partial = batch.messages.slice(0, 6);
    expect(() => producer.produceBatch(topic, batch.data, partial)).toThrow(/four offsets per message/);
    const beyond = batch.messages.slice();
    beyond[7] = batch.data.length + 1; // the second key's end
    expect(() => producer.produceBatch(topic, batch.data, beyond)).toThrow(/ends beyond data/);
    const backwards = batch.messages.slice();
    [backwards[4], backwards[5]] = [backwards[5]!, backwards[4]!]; // the second value
    expect(() => producer.produceBatch(topic, batch.data, backwards)).toThrow(/ends before it starts/);
    expect(() => producer.produceBatch(topic, batch.data, Array.from(batch.messages) as unknown as Uint32Array)).toThrow(TypeError);
    await flush(producer);
    await new Promise((r) => setTimeout(r, 200));
    expect(reports).toEqual([]);
  });

  it('queues every message librdkafka takes, reports how many when it refuses one, and never reports the refused one', async () => {
    reports.length = 0;
    // The third value is made larger than message.max.bytes (1,000,000): librdkafka refuses it at once.
    const points = [point('ok-1', 1), point('ok-2', 2), point('too-big', 3), point('ok-3', 4)];
    const batch = encodePoints(points);
    // The third value points at 1,100,000 spaces after the encoded messages.
    const data = Buffer.concat([batch.data, Buffer.alloc(1_100_000, 0x20)]);
    const messages = batch.messages.slice();
    messages[8] = batch.data.length;
    messages[9] = data.length;
    const error = (() => {
      try {
        producer.produceBatch(topic, data, messages, 'failing request');
      } catch (err) {
        return err as Kafka.LibrdKafkaError & { enqueued: number };
      }
      throw new Error('produceBatch did not throw');
    })();
    expect(error.code).toBe(Kafka.CODES.ERRORS.ERR_MSG_SIZE_TOO_LARGE);
    // librdkafka takes the messages of one call one by one: those before and after the refused one.
    expect(error.enqueued).toBe(3);
    await flush(producer);
    // The three taken are delivered and report; the refused one never does.
    await until(() => reports.length >= 3, 'three delivery reports');
    await new Promise((r) => setTimeout(r, 200));
    expect(reports.map((r) => [r.err, r.report.opaque])).toEqual([
      [null, 'failing request'],
      [null, 'failing request'],
      [null, 'failing request'],
    ]);
    const got = await consumeAll(topic, { expected: 53, partitions: PARTITIONS });
    expect(
      got
        .filter((m) => m.key.startsWith('ok-'))
        .map((m) => m.key)
        .sort(),
    ).toEqual(['ok-1', 'ok-2', 'ok-3']);
    expect(got.some((m) => m.key === 'too-big')).toBe(false);
  });

  it('takes values and keys anywhere in data, keys inside values, as the single pass hands a body over', async () => {
    reports.length = 0;
    // As JSON.stringify writes them (each value is the object as it stands in the body, its key the
    // id inside it), then one with spaces and without speed (written after a copy of the body).
    const stringified = [1, 2, 3].map((i) => point(`sp-${i}`, i));
    const text = `${JSON.stringify(stringified).slice(0, -1)}, {"container_id": "sp-4", "lat": 4.50, "lon": 4.4, "timestamp": "2024-05-01T12:00:00Z"}]`;
    const batch = singlePass(Buffer.from(text), 10);
    if (batch === null || 'details' in batch) throw new Error(`the single pass did not take the body: ${JSON.stringify(batch)}`);
    expect(producer.produceBatch(topic, batch.data, batch.messages, 'single pass')).toBe(4);
    await flush(producer);
    await until(() => reports.length === 4, 'four delivery reports');
    const got = await consumeAll(topic, { expected: 57, partitions: PARTITIONS });
    const general = messagesOf(encodePoints((validatePoints(JSON.parse(text) as unknown[]) as { points: TrackPoint[] }).points));
    expect(
      got
        .filter((m) => m.key.startsWith('sp-'))
        .map((m) => [m.key, m.value])
        .sort(),
    ).toEqual(general.keys.map((key, i) => [key, general.values[i]!.toString()]).sort());
  });

  it('keeps its topic handle across calls, takes another topic when asked, and starts afresh after a reconnect', async () => {
    reports.length = 0;
    // The patch keeps the last topic's handle from call to call; a call for another topic replaces it,
    // and disconnect releases it with the client it belongs to (a handle kept from the old client,
    // used after the reconnect, sent garbage: "Broker: Message size too large" when this was tried).
    const send = (to: string, id: string) => {
      const batch = encodePoints([point(id, 1)]);
      expect(producer.produceBatch(to, batch.data, batch.messages, id)).toBe(1);
    };
    send(topic, 'kept-1');
    send(topic, 'kept-2');
    send(otherTopic, 'other-1');
    send(topic, 'kept-3');
    await flush(producer);
    await disconnect(producer);
    await connectProducer(producer);
    // The same topic as the last call before the disconnect: a handle kept from the old client would be used.
    send(topic, 'kept-4');
    send(otherTopic, 'other-2');
    await flush(producer);
    await until(() => reports.length === 6, 'six delivery reports');
    expect(reports.filter((r) => r.err !== null)).toEqual([]);
    expect(reports.map((r) => [r.report.opaque, r.report.topic]).sort()).toEqual(
      [
        ['kept-1', topic],
        ['kept-2', topic],
        ['kept-3', topic],
        ['kept-4', topic],
        ['other-1', otherTopic],
        ['other-2', otherTopic],
      ].sort(),
    );
    const got = await consumeAll(topic, { expected: 60, partitions: PARTITIONS });
    expect(
      got
        .filter((m) => m.key.startsWith('kept-'))
        .map((m) => m.key)
        .sort(),
    ).toEqual(['kept-1', 'kept-2', 'kept-3', 'kept-4']);
    const other = await consumeAll(otherTopic, { expected: 2, partitions: PARTITIONS });
    expect(other.map((m) => m.key).sort()).toEqual(['other-1', 'other-2']);
  });
});

// With reports for failures only (ACK_MODE=async, the default), what the service relies on: a queue
// that empties completely once Kafka has everything, as the service's queue accounting (librdkafka's
// statistics) and flush() at shutdown see it, and a client that can be closed and opened again.
const asyncTopic = fileTopic('produce-batch-async', PARTITIONS);

describe('librdkafka with delivery reports for failures only', () => {
  it('counts nothing queued once every message is delivered, flushes, and closes cleanly', async () => {
    const config = loadConfig({ MQ_BROKERS: BROKERS, MQ_TOPIC: asyncTopic });
    const settings = producerSettings(config, 'produce-batch-async-test');
    expect(settings.global['delivery.report.only.error']).toBe(true);
    const failuresOnly = new Kafka.Producer(settings.global, settings.topic);
    const queued: { msgCnt: number; msgSize: number }[] = [];
    failuresOnly.on('event.stats', (event: { message: string }) => {
      const stats = JSON.parse(event.message) as { msg_cnt: number; msg_size: number };
      queued.push({ msgCnt: stats.msg_cnt, msgSize: stats.msg_size });
    });
    failuresOnly.setPollInterval(10);
    await connectProducer(failuresOnly);
    try {
      const batch = encodePoints(Array.from({ length: 100 }, (_, i) => point(`c-${i % 37}`, i)));
      const requests = 30;
      for (let r = 0; r < requests; r++) expect(failuresOnly.produceBatch(asyncTopic, batch.data, batch.messages)).toBe(100);
      // flush() returns only once librdkafka's count of queued messages is back to zero.
      await flush(failuresOnly);
      // A statistics event librdkafka took before the flush may still reach JavaScript after it (seen
      // beside the other lane of make test: 60 messages): the count must come to nothing, not stay.
      await until(() => queued.at(-1)?.msgCnt === 0 && queued.at(-1)?.msgSize === 0, 'statistics counting nothing queued after the flush');

      const got = await consumeAll(asyncTopic, { expected: requests * 100, partitions: PARTITIONS });
      expect(got).toHaveLength(requests * 100);
      // The client still holds its topic: more messages after the first delivery go through.
      expect(failuresOnly.produceBatch(asyncTopic, batch.data, batch.messages)).toBe(100);
      await flush(failuresOnly);
      await until(() => queued.at(-1)?.msgCnt === 0, 'statistics counting nothing queued');
    } finally {
      await disconnect(failuresOnly);
    }
    // Opened again after the close, the client takes the topic afresh.
    await connectProducer(failuresOnly);
    try {
      const again = encodePoints([point('after-close', 1)]);
      expect(failuresOnly.produceBatch(asyncTopic, again.data, again.messages)).toBe(1);
      await flush(failuresOnly);
    } finally {
      await disconnect(failuresOnly);
    }
    const all = await consumeAll(asyncTopic, { expected: 3101, partitions: PARTITIONS });
    expect(all).toHaveLength(3101);
  });
});

// The write-ahead journal's producer: every record produced with its tag (its journal record), failure
// reports only, and the acknowledgements counted per tag by librdkafka (patches/librdkafka-acks-counted-per-tag.patch).
describe('Producer#produceBatch with a tag, and takeAcks()', () => {
  const taggedTopic = fileTopic('produce-batch-tagged', PARTITIONS);

  it('counts every acknowledged message under its tag, reports none of them, and keeps the timestamp it is given', async () => {
    const config = loadConfig({ MQ_BROKERS: BROKERS, MQ_TOPIC: taggedTopic });
    const settings = producerSettings(config, 'produce-batch-tags');
    const tagged = new Kafka.Producer(settings.global, settings.topic);
    const reported: Kafka.DeliveryReport[] = [];
    tagged.on('delivery-report', (_err, report) => reported.push(report));
    tagged.setPollInterval(10);
    await connectProducer(tagged);
    const counted = new Map<number, number>();
    try {
      const a = encodePoints(Array.from({ length: 30 }, (_, i) => point(`t-${i % 7}`, i)));
      expect(tagged.produceBatch(taggedTopic, a.data, a.messages, 5, 1_700_000_000_123)).toBe(30);
      const b = encodePoints(Array.from({ length: 12 }, (_, i) => point(`u-${i % 5}`, i)));
      expect(tagged.produceBatch(taggedTopic, b.data, b.messages, 2 ** 31 - 1)).toBe(12);
      expect(tagged.queueLength()).toBeGreaterThan(0);
      expect(() => tagged.produceBatch(taggedTopic, b.data, b.messages, 2 ** 31)).toThrow(/tag must be a whole number/);
      await flush(tagged);
      await until(() => {
        for (let acks = tagged.takeAcks(); acks !== undefined; acks = tagged.takeAcks()) {
          for (let i = 0; i < acks.length; i += 2) counted.set(acks[i]!, (counted.get(acks[i]!) ?? 0) + acks[i + 1]!);
        }
        return (counted.get(5) ?? 0) + (counted.get(2 ** 31 - 1) ?? 0) === 42;
      }, '42 acknowledgements');
      expect(Object.fromEntries(counted)).toEqual({ 5: 30, [2 ** 31 - 1]: 12 });
      expect(tagged.takeAcks()).toBeUndefined();
      expect(tagged.queueLength()).toBe(0);
      expect(reported).toEqual([]);
    } finally {
      await disconnect(tagged);
    }
    const got = await consumeAll(taggedTopic, { expected: 42, partitions: PARTITIONS });
    expect(got.filter((m) => m.key.startsWith('t-')).map((m) => m.timestamp)).toEqual(Array(30).fill(1_700_000_000_123));
  });
});
