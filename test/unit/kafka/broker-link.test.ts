// Keeping in touch with the brokers, without one: a real Kafka client pointed at a port where
// nothing listens (no broker is mocked: there is none). What is connected is the integration tests'.
import { Writable } from 'node:stream';
import Kafka from '@confluentinc/kafka-javascript';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { BrokerLink, hasLeaders } from '../../../src/kafka/broker-link.js';
import { BrokerState } from '../../../src/kafka/broker-state.js';
import { freePort } from '../../../support/ports.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function logged() {
  const lines: { msg: string; brokers?: string; level: number }[] = [];
  const log = pino(
    { level: 'debug' },
    new Writable({ write: (chunk: Buffer, _enc, done) => (lines.push(JSON.parse(chunk.toString()) as (typeof lines)[number]), done()) }),
  );
  return { log, lines };
}

let stop: (() => void) | null = null;
afterEach(() => stop?.());

describe('BrokerLink without a broker', () => {
  it('is not connected, logs why with the brokers, tries again every second, and stops trying once stopped', { timeout: 15_000 }, async () => {
    const brokers = `127.0.0.1:${await freePort()}`;
    const producer = new Kafka.Producer({ 'metadata.broker.list': brokers, 'reconnect.backoff.max.ms': 100 }, {});
    let attempts = 0;
    const connect = producer.connect.bind(producer);
    producer.connect = (...args: Parameters<typeof connect>) => (attempts++, connect(...args));
    const { log, lines } = logged();
    let changed = 0;
    const link = new BrokerLink(producer, new BrokerState({ brokers, topic: 't', graceMs: 1_000 }), {
      brokers,
      topic: 't',
      log,
      changed: () => changed++,
      connectTimeoutMs: 300,
    });
    stop = () => link.stop();

    link.connect();
    await sleep(2_900); // 300 ms an attempt, then 1 s before the next
    expect(attempts).toBeGreaterThanOrEqual(2);
    expect(link.connected).toBe(false);
    expect(changed).toBe(0); // nothing to recompute: still not connected
    const failures = lines.filter((l) => l.msg === 'cannot connect to kafka; retrying');
    expect(failures.length).toBe(1); // the first at once, the rest folded into the next report
    expect(failures[0]).toMatchObject({ brokers, level: 40 });

    link.stop();
    await sleep(400); // an attempt in flight ends
    const after = attempts;
    await sleep(1_500);
    expect(attempts).toBe(after);
  });
});

describe('hasLeaders', () => {
  const metadata = (partitions: { leader: number }[], name = 't') =>
    ({
      orig_broker_id: 0,
      orig_broker_name: 'b',
      brokers: [],
      topics: [{ name, partitions: partitions.map((p, id) => ({ id, leader: p.leader, replicas: [], isrs: [] })) }],
    }) as Kafka.Metadata;

  it('is true once one partition of the topic has a leader', () => {
    expect(hasLeaders(metadata([{ leader: -1 }, { leader: 2 }]), 't')).toBe(true);
  });

  it('is false for a topic absent from the metadata, without partitions, or without any leader', () => {
    expect(hasLeaders(metadata([{ leader: 1 }], 'other'), 't')).toBe(false);
    expect(hasLeaders(metadata([]), 't')).toBe(false);
    expect(hasLeaders(metadata([{ leader: -1 }, { leader: -1 }]), 't')).toBe(false);
  });
});
