// The write-ahead path's promises that hold without a broker: a real Kafka client whose
// brokers do not answer (none is mocked). Until Kafka has answered, nothing is taken, nothing is
// journaled, and readiness says why; a journal that failed takes nothing and readiness says so;
// librdkafka settings it does not know stop the worker before it serves.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config.js';
import { KafkaProducer } from '../../../src/kafka/producer.js';
import { producerSettings } from '../../../src/kafka/settings.js';
import { createWorkerMetrics } from '../../../src/metrics/metrics.js';
import { encodePoints } from '../../../src/track-point/encode.js';
import { sinkOfMode } from '../../../src/write-ahead/delivery-mode.js';
import { freePort } from '../../../support/ports.js';
import { CrashableFiles } from '../../helpers/crashable-files.js';
import { openJournal } from '../../helpers/journal.js';

const quiet = pino({ level: 'silent' }, new Writable({ write: (_c, _e, done) => done() }));

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function setup(env: Record<string, string> = {}, files?: CrashableFiles) {
  const dir = files === undefined ? mkdtempSync(join(tmpdir(), 'write-ahead-unit-')) : '/journal';
  if (files === undefined) dirs.push(dir);
  const config = loadConfig({ MQ_BROKERS: `127.0.0.1:${await freePort()}`, MQ_TOPIC: 'unit', JOURNAL_DIR: dir, ...env });
  const metrics = createWorkerMetrics('unit');
  const { journal } = openJournal({ dir, maxBytes: config.journalMaxBytes, sync: config.journalSync, ...(files === undefined ? {} : { files }) });
  const { sink: path } = sinkOfMode(
    {
      config,
      log: quiet,
      metrics,
      journal,
      producer: (events) => new KafkaProducer(config, quiet, metrics, producerSettings(config, 'unit'), events),
      events: { onFatal: () => undefined },
    },
    null,
  );
  return { config, journal, path };
}

const points = (n: number) =>
  encodePoints(Array.from({ length: n }, (_, i) => ({ container_id: `c-${i}`, lat: 1, lon: 2, timestamp: '2024-05-01T12:00:00Z', speed: 0 })));

describe('the write-ahead path before Kafka has answered', () => {
  it('refuses every request broker_unavailable, from the headers and from the body, and journals nothing', async () => {
    const { path, journal } = await setup();
    expect(path.admission()).toBe('broker_unavailable');
    expect(path.accept(points(3))).toBe('broker_unavailable');
    expect(journal.records).toBe(0);
    expect(journal.bytes).toBe(0);
  });

  it('ACK_MODE=delivered: refused at once, nothing left waiting (the request is answered 500, not held)', async () => {
    const { path } = await setup({ ACK_MODE: 'delivered' });
    expect(path.accept(points(2))).toBe('broker_unavailable');
  });

  it('readiness says which brokers it is not connected to', async () => {
    const { path, config } = await setup();
    expect(path.readiness()).toEqual({ ready: false, reason: `not connected to ${config.brokers}` });
  });
});

describe('the write-ahead path with a journal that failed', () => {
  it('refuses every request journal_failed, before and after the body, and readiness says why', async () => {
    const files = new CrashableFiles();
    const { path, journal } = await setup({ JOURNAL_SYNC: 'disk' }, files);
    const batch = () => ({ ...points(1), data: Buffer.from(points(1).data) });
    journal.append(batch(), 1);
    // The disk fails the next write (EIO): the journal fails for good.
    files.faults = { rate: 1, random: () => 0 };
    expect(() => journal.append(batch(), 2)).toThrow(/cannot write the journal file/);
    files.faults = null;
    expect(journal.failure).not.toBeNull();
    expect(path.admission()).toBe('journal_failed');
    expect(path.accept(points(1))).toBe('journal_failed');
    expect(path.readiness()).toEqual({
      ready: false,
      reason: expect.stringMatching(
        /^the journal failed \(cannot write the journal file \/journal\/slot-0\.000000000000\.wal: EIO.*\): this worker takes no points and is being restarted$/,
      ),
    });
  });
});

describe('the Kafka producer settings', () => {
  it('a librdkafka property librdkafka does not know stops the construction and is named', async () => {
    await expect(setup({ MQ_OPT_NO_SUCH_PROPERTY: '1' })).rejects.toThrow(/no\.such\.property/);
  });
});
