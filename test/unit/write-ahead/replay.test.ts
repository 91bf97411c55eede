// The write-ahead path's replay, producing again from the journal: failed messages after a back-off
// (grouped by record, each with its record's timestamp), records an earlier process left while librdkafka's queue has room.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { JournalBatch } from '../../../src/journal/record.js';
import { Replay } from '../../../src/write-ahead/replay.js';
import { Ledger } from '../../../src/write-ahead/ledger.js';
import { openJournal } from '../../helpers/journal.js';
import { encodePoints } from '../../../src/track-point/encode.js';
import { messagesOf } from '../../../support/messages.js';

const batch = (tag: string, n: number): JournalBatch => {
  const e = encodePoints(Array.from({ length: n }, (_, i) => ({ container_id: `${tag}-${i}`, lat: i, lon: 2, timestamp: '2024-05-01T12:00:00Z', speed: 1 })));
  return { count: e.count, data: Buffer.from(e.data), messages: e.messages.slice() };
};
const keys = (b: JournalBatch) => messagesOf(b).keys.map((k) => k.toString());

function setup(opts: { available?: boolean; takes?: number; queue?: number; dir?: string } = {}) {
  const { journal } = openJournal({ dir: opts.dir ?? mkdtempSync(join(tmpdir(), 'replay-')), maxBytes: 2 ** 30, sync: 'process' });
  let now = 0;
  const produced: { tag: number; timestamp: number; keys: string[] }[] = [];
  const sink = {
    available: opts.available ?? true,
    takes: opts.takes ?? Infinity,
    queue: opts.queue ?? 0,
    produce(b: JournalBatch, tag: number, timestamp: number) {
      produced.push({ tag, timestamp, keys: keys(b) });
      const taken = Math.min(b.count, this.takes);
      this.queue += taken;
      return taken;
    },
    queueLength() {
      return this.queue;
    },
    kafkaAvailable() {
      return this.available;
    },
  };
  const ledger = new Ledger(journal);
  const replay = new Replay(ledger, sink, 10, () => now);
  return { ledger, sink, replay, produced, advance: (ms: number) => (now += ms) };
}

const failed = (b: JournalBatch, id: number, i: number, possiblyWritten = false) => {
  const [vs, ve, ks, ke] = [b.messages[4 * i]!, b.messages[4 * i + 1]!, b.messages[4 * i + 2]!, b.messages[4 * i + 3]!];
  return { id, value: Buffer.from(b.data.subarray(vs, ve)), key: Buffer.from(b.data.subarray(ks, ke)), possiblyWritten };
};

describe('Replay', () => {
  it("produces failed messages again after the back-off, grouped by record, each with its record's timestamp", () => {
    const { ledger, replay, produced, advance } = setup();
    const a = batch('a', 3);
    const b = batch('b', 2);
    const ra = ledger.append(a, 111);
    const rb = ledger.append(b, 222);
    replay.fail(failed(a, ra.id, 0, true));
    replay.fail(failed(b, rb.id, 1));
    replay.fail(failed(a, ra.id, 2));
    replay.pass();
    expect(produced).toEqual([]);
    advance(1_000);
    replay.pass();
    expect(produced).toEqual([
      { tag: ra.id, timestamp: 111, keys: ['a-0', 'a-2'] },
      { tag: rb.id, timestamp: 222, keys: ['b-1'] },
    ]);
    expect(replay.counts).toEqual({ retried: 3, recovered: 0, possibleDuplicates: 1 });
    expect(replay.backlog).toBe(0);
  });

  it('waits longer after a retry Kafka took nothing of, up to 10 s, and not while Kafka is away', () => {
    const { ledger, sink, replay, produced, advance } = setup({ takes: 0 });
    const a = batch('a', 1);
    const r = ledger.append(a, 1);
    replay.fail(failed(a, r.id, 0));
    const tries: number[] = [];
    let t = 0;
    for (let step = 0; step < 400; step++) {
      advance(100);
      t += 100;
      const before = produced.length;
      replay.pass();
      if (produced.length > before) tries.push(t);
    }
    const gaps = tries.slice(1).map((x, i) => x - tries[i]!);
    expect(gaps.slice(0, 4)).toEqual([2_000, 4_000, 8_000, 10_000]);
    sink.available = false;
    advance(60_000);
    const before = produced.length;
    replay.pass();
    expect(produced.length).toBe(before);
    expect(replay.backlog).toBe(1);
  });

  it("produces what an earlier process left while librdkafka's queue is under its share, and then stops", () => {
    const dir = mkdtempSync(join(tmpdir(), 'replay-recovered-'));
    const { journal: earlier } = openJournal({ dir, maxBytes: 2 ** 30, sync: 'process' });
    for (let i = 0; i < 8; i++) earlier.append(batch(`r${i}`, 4), 1_000 + i);
    const { replay, produced, sink } = setup({ dir });
    replay.pass();
    // A share of 10 messages: three records of 4 are produced, then the queue is over it.
    expect(produced.map((p) => [p.keys[0], p.timestamp])).toEqual([
      ['r0-0', 1_000],
      ['r1-0', 1_001],
      ['r2-0', 1_002],
    ]);
    sink.queue = 0;
    replay.pass();
    expect(produced).toHaveLength(6);
    expect(replay.counts.recovered).toBe(24);
    expect(replay.counts.possibleDuplicates).toBe(24);
  });
});
