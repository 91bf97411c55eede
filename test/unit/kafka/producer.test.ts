// The producer's promises that hold without a broker: a real node-rdkafka client whose brokers do not
// answer (none is mocked). Until Kafka has answered, nothing is taken, nothing is journaled, and
// readiness says why; librdkafka settings it does not know stop the worker before it serves.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config.js';
import { Journal } from '../../../src/journal/journal.js';
import { newTicket } from '../../../src/kafka/delivery-reports.js';
import { TrackProducer } from '../../../src/kafka/producer.js';
import { producerSettings } from '../../../src/kafka/settings.js';
import { createWorkerMetrics } from '../../../src/metrics/metrics.js';
import { encodePoints } from '../../../src/track-point/encode.js';
import { freePort } from '../../../support/ports.js';

const quiet = pino({ level: 'silent' }, new Writable({ write: (_c, _e, done) => done() }));

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function setup(env: Record<string, string> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'producer-unit-'));
  dirs.push(dir);
  const config = loadConfig({ MQ_BROKERS: `127.0.0.1:${await freePort()}`, MQ_TOPIC: 'unit', JOURNAL_DIR: dir, ...env });
  const journal = new Journal({ dir, slot: 0, slots: 1, maxBytes: config.journalMaxBytes, sync: config.journalSync });
  const producer = new TrackProducer(config, quiet, createWorkerMetrics('unit'), journal, producerSettings(config, 'unit'));
  return { config, journal, producer };
}

const points = (n: number) => encodePoints(Array.from({ length: n }, (_, i) => ({ container_id: `c-${i}`, lat: 1, lon: 2, timestamp: '2024-05-01T12:00:00Z', speed: 0 })));

describe('TrackProducer before Kafka has answered', () => {
  it('refuses every request broker_unavailable, from the headers and from the body, and journals nothing', async () => {
    const { producer, journal } = await setup();
    expect(producer.admission()).toBe('broker_unavailable');
    expect(producer.tryEnqueue(points(3))).toBe('broker_unavailable');
    expect(journal.records).toBe(0);
    expect(journal.bytes).toBe(0);
  });

  it('ACK_MODE=delivered: refused at once, the ticket never settles (the request is answered 500, not held)', async () => {
    const { producer } = await setup({ ACK_MODE: 'delivered' });
    let settled = 0;
    const ticket = newTicket(() => settled++);
    expect(producer.tryEnqueue(points(2), ticket)).toBe('broker_unavailable');
    await new Promise((r) => setTimeout(r, 50));
    expect(settled).toBe(0);
  });

  it('readiness says which brokers it is not connected to', async () => {
    const { producer, config } = await setup();
    expect(producer.readiness()).toEqual({ ready: false, reason: `not connected to ${config.brokers}` });
  });
});

describe('TrackProducer settings', () => {
  it('a librdkafka property librdkafka does not know stops the construction and is named', async () => {
    await expect(setup({ MQ_OPT_NO_SUCH_PROPERTY: '1' })).rejects.toThrow(/no\.such\.property/);
  });
});
