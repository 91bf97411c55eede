// The write-ahead journal on its own: records written before the answer, marked done as Kafka
// acknowledges them, segments deleted once done, and what a crashed process left read back, torn
// and damaged records counted and skipped, each costing itself alone.
import {
  appendFileSync,
  closeSync,
  existsSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  statSync,
  truncateSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { pbkdf2 } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { crc32c } from '../../../src/journal/native.js';
import { describe, expect, it } from 'vitest';
import { Journal, JournalError, SEGMENT_MAX_BYTES } from '../../../src/journal/journal.js';
import { Ledger } from '../../../src/write-ahead/ledger.js';
import { mappableFileSystem } from '../../../src/journal/native.js';
import { decodeMarks, encodeMarks } from '../../../src/journal/marks.js';
import { recordBytes, scanSegment, type JournalBatch, type SegmentItem } from '../../../src/journal/record.js';
import { encodePoints } from '../../../src/track-point/encode.js';
import { messagesOf } from '../../../support/messages.js';
import { openJournal, type OpenOptions } from '../../helpers/journal.js';

const dir = () => mkdtempSync(join(tmpdir(), 'journal-unit-'));
/** A journal opened as the next process of the slot opens it (the one before is gone). */
const open = (d: string, over: Partial<OpenOptions> = {}) => {
  const corrupt: string[] = [];
  const { journal } = openJournal({
    dir: d,
    maxBytes: 64 * 1024 * 1024,
    sync: 'process',
    onDamage: (_f, at, _records, what) => corrupt.push(`${at}: ${what}`),
    ...over,
  });
  return { journal, corrupt };
};
/** A journal directory's files, but the slots' locks. */
const names = (d: string) => readdirSync(d).filter((n) => !n.endsWith('.lock'));
/** The segment files of a journal directory. */
const segments = (d: string) => readdirSync(d).filter((n) => n.endsWith('.wal'));
/** The records and damage of segment `seq`'s file, as reading it finds them. */
const scan = (bytes: Buffer, seq = 0): SegmentItem[] => [...scanSegment(bytes, seq)];
/** A request of `n` points as the producer gets it (copies: encodePoints reuses its buffers). */
const batch = (tag: string, n: number): JournalBatch => {
  const e = encodePoints(Array.from({ length: n }, (_, i) => ({ container_id: `${tag}-${i}`, lat: i, lon: 2, timestamp: '2024-05-01T12:00:00Z', speed: 1 })));
  return { count: e.count, data: Buffer.from(e.data), messages: e.messages.slice() };
};
const keys = (b: JournalBatch) => messagesOf(b).keys.map((k) => k.toString());
const recovered = (journal: Journal) => journal.nextRecovered(10_000).map((r) => ({ keys: keys(r.record), timestamp: r.record.timestamp, entry: r.entry }));

/** The paths of the files this process has open (Linux). */
function openFiles(): string[] {
  return readdirSync('/proc/self/fd').flatMap((fd) => {
    try {
      return [readlinkSync(`/proc/self/fd/${fd}`)];
    } catch {
      return []; // closed meanwhile (the directory's own fd)
    }
  });
}

/** Every threadpool thread busy for a while (pbkdf2), so that an fdatasync waits behind them; resolves when they are free. */
function holdThreadpool(): Promise<unknown> {
  const threads = Number(process.env.UV_THREADPOOL_SIZE ?? 4);
  return Promise.all(Array.from({ length: threads }, () => new Promise((r) => pbkdf2('x', 'y', 300_000, 32, 'sha256', r))));
}

describe('Journal', () => {
  it.each([true, false])(
    'gives a record this process appended back as it was appended (mapped %s): read back from its file, viewed in its mapping, after the segment rolled over too',
    (mapped) => {
      const d = dir();
      const { journal } = open(d, { mapSegments: mapped, segmentBytes: 8192 });
      const batches = Array.from({ length: 40 }, (_, i) => batch(`rb${i}`, 1 + (i % 5)));
      const records = batches.map((b, i) => journal.append(b, 1_000 + i));
      expect(new Set(records.map((r) => r.segment.seq)).size).toBeGreaterThan(1); // some segments sealed
      records.forEach((record, i) => {
        const back = journal.readBack(record);
        expect([keys(back), back.timestamp, messagesOf(back).values.map(String)]).toEqual([
          keys(batches[i]!),
          1_000 + i,
          messagesOf(batches[i]!).values.map(String),
        ]);
        const view = journal.view(record);
        if (record.segment.map === null) expect(view).toBeNull();
        else expect([keys(view!), messagesOf(view!).values.map(String)]).toEqual([keys(batches[i]!), messagesOf(batches[i]!).values.map(String)]);
      });
      if (mapped && mappableFileSystem(d) !== null) expect(records.some((r) => journal.view(r) !== null)).toBe(true);
    },
  );

  it('writes each record before it returns, whole and readable: the bytes on disk are the record', () => {
    const d = dir();
    const { journal } = open(d, { mapSegments: false });
    const b = batch('a', 3);
    const r = journal.append(b, 1_700_000_000_123);
    const [file] = segments(d);
    const bytes = readFileSync(join(d, file!));
    expect(journal.mappedOn).toBeNull();
    expect(bytes.byteLength).toBe(recordBytes(b));
    const [read] = scan(bytes);
    expect(read?.kind).toBe('record');
    if (read?.kind !== 'record') return;
    expect([keys(read.record), read.record.timestamp, read.index]).toEqual([['a-0', 'a-1', 'a-2'], 1_700_000_000_123, 0]);
    expect([r.points, journal.records, journal.bytes]).toEqual([3, 1, bytes.byteLength]);
  });

  it.runIf(mappableFileSystem(tmpdir()) !== null)(
    'copies each record into a segment file allocated whole and mapped: on disk at once, without a close, zeros after it',
    () => {
      const d = dir();
      const { journal } = open(d, { maxBytes: 4 * 1024 * 1024 });
      const b = batch('a', 3);
      journal.append(b, 1_700_000_000_123);
      journal.append(batch('b', 1), 1_700_000_000_124);
      expect(journal.mappedOn).toBe(mappableFileSystem(d));
      // Read through the file, not the mapping, as the next process after a crash does.
      const [file] = segments(d);
      const bytes = readFileSync(join(d, file!));
      const used = recordBytes(b) + recordBytes(batch('b', 1));
      expect(bytes.byteLength).toBe(4 * 1024 * 1024); // the segment's capacity: JOURNAL_MAX_BYTES, below 16 MiB
      expect(bytes.subarray(used).equals(Buffer.alloc(bytes.byteLength - used))).toBe(true);
      // Two records, then zeros: the end, not damage.
      const items = scan(bytes);
      expect(items.map((i) => (i.kind === 'record' ? [i.index, keys(i.record), i.record.timestamp] : i.kind))).toEqual([
        [0, ['a-0', 'a-1', 'a-2'], 1_700_000_000_123],
        [1, ['b-0'], 1_700_000_000_124],
      ]);
      // The limit counts records, not the allocated file; a restart counts the same.
      expect(journal.bytes).toBe(used);
      const after = open(d).journal;
      expect([after.bytes, after.records]).toEqual([used, 2]);
      expect(recovered(after).map((r) => r.keys)).toEqual([['a-0', 'a-1', 'a-2'], ['b-0']]);
    },
  );

  it.runIf(mappableFileSystem(tmpdir()) !== null && existsSync('/proc/self/maps'))(
    'keeps at most three segments mapped however many it holds (an outage), and none once closed',
    () => {
      const d = dir();
      const mapped = () =>
        readFileSync('/proc/self/maps', 'utf8')
          .split('\n')
          .filter((l) => l.includes(d)).length;
      const { journal } = open(d, { maxBytes: 128 * 1024 * 1024 });
      const big = batch('big', 5000); // about 0.5 MB a record: 5 segments of 16 MiB
      const records = Array.from({ length: Math.ceil((5 * SEGMENT_MAX_BYTES) / recordBytes(big)) }, () => journal.append(big, 1));
      expect(readdirSync(d).filter((n) => n.endsWith('.wal')).length).toBeGreaterThanOrEqual(5);
      expect(mapped()).toBeLessThanOrEqual(3);
      for (const r of records) journal.done(r);
      expect(mapped()).toBeLessThanOrEqual(3);
      journal.close();
      expect(mapped()).toBe(0);
    },
  );

  it.runIf(mappableFileSystem(tmpdir()) !== null)(
    'after a crash in the middle of a copy into a mapped segment, reads the records before it and counts the torn one',
    () => {
      const d = dir();
      const { journal: first } = open(d);
      for (const t of ['a', 'b', 'c']) first.append(batch(t, 2), 7);
      // What a process killed during its third copy leaves: the head of a record, then nothing (the
      // zeros of the file allocated whole).
      const file = join(d, segments(d)[0]!);
      const bytes = readFileSync(file);
      const third = recordBytes(batch('a', 2)) * 2;
      const fd = openSync(file, 'r+');
      writeSync(fd, Buffer.alloc(first.bytes - third - 60), 0, first.bytes - third - 60, third + 60);
      closeSync(fd);
      expect(bytes.subarray(third, third + 4).toString()).toBe('TIJ3');
      const { journal, corrupt } = open(d);
      expect(recovered(journal).map((r) => r.keys[0])).toEqual(['a-0', 'b-0']);
      expect(journal.damagedRecords).toBe(1);
      expect(corrupt[0]).toMatch(/record 2: its body's checksum does not match/);
    },
  );

  it('reads the records of the versions before ("TIJ1", zlib CRC-32; "TIJ2", CRC-32C; no index): an upgrade recovers what they left', () => {
    for (const magic of ['TIJ1', 'TIJ2'] as const) {
      const d = dir();
      // Written as those versions wrote them: magic | crc | length | count | segment | 0 | timestamp | offsets | data,
      // the CRC over all after the 12-byte prefix; the second one's CRC wrong.
      const legacy = (b: JournalBatch, timestamp: number, damaged: boolean) => {
        const head = Buffer.alloc(32 + 16 * b.count);
        head.write(magic, 0, 'latin1');
        head.writeUInt32LE(head.byteLength - 12 + b.data.byteLength, 8);
        head.writeUInt32LE(b.count, 12);
        head.writeDoubleLE(timestamp, 24);
        head.set(new Uint8Array(b.messages.buffer, b.messages.byteOffset, 16 * b.count), 32);
        const body = Buffer.concat([head.subarray(12), b.data]);
        head.writeUInt32LE(((magic === 'TIJ1' ? crc32(body) : crc32c(body)) ^ (damaged ? 1 : 0)) >>> 0, 4);
        return Buffer.concat([head, b.data]);
      };
      writeFileSync(
        join(d, 'slot-0.000000000000.wal'),
        Buffer.concat([legacy(batch('old', 2), 5, false), legacy(batch('damaged', 1), 6, true), legacy(batch('after', 1), 7, false)]),
      );
      const { journal } = open(d);
      expect(
        recovered(journal).map((r) => [r.keys, r.timestamp]),
        magic,
      ).toEqual([
        [['old-0', 'old-1'], 5],
        [['after-0'], 7],
      ]);
      expect(journal.damagedRecords, magic).toBe(1);
    }
  });

  it('keeps a record until all its points are acknowledged (the ledger counts them), then marks it done', () => {
    const d = dir();
    const { journal } = open(d);
    const ledger = new Ledger(journal);
    const r = ledger.append(batch('a', 3), 1);
    expect(ledger.acknowledged(r.id, 2)).toBeNull();
    expect([ledger.pendingPoints, journal.records]).toEqual([1, 1]);
    expect(ledger.acknowledged(r.id, 1)).toBe(r);
    expect(journal.records).toBe(0);
    journal.flushMarks();
    const marks = readdirSync(d).find((n) => n.endsWith('.done'))!;
    expect(decodeMarks(readFileSync(join(d, marks)), 0)).toEqual(new Set([r.index]));
  });

  it('reads a mark as done only when its check holds: zeros or a torn mark cost a duplicate, never the record (marks.ts)', () => {
    const d = dir();
    const { journal: first } = open(d);
    const records = ['a', 'b', 'c'].map((t) => first.append(batch(t, 1), 1));
    first.done(records[1]!);
    first.flushMarks();
    first.close();
    // What a power cut may leave of marks never synced: the file's size kept over data that was not
    // (zeros, which once read as "record 0 is done"), and a mark torn in half.
    const marks = join(
      d,
      readdirSync(d).find((n) => n.endsWith('.done'))!,
    );
    const good = readFileSync(marks);
    const torn = Buffer.from(encodeMarks(0, [2]));
    torn.writeUInt16LE(0, 6);
    writeFileSync(marks, Buffer.concat([good, Buffer.alloc(8), torn]));
    const { journal } = open(d);
    expect(recovered(journal).map((r) => r.keys[0])).toEqual(['a-0', 'c-0']);
    // And the marks of an earlier version (bare u32 indexes in .acks) are still read.
    writeFileSync(marks.replace(/\.done$/, '.acks'), Buffer.from(Uint32Array.of(0).buffer));
    expect(recovered(open(d).journal).map((r) => r.keys[0])).toEqual(['c-0']);
  });

  it('after a crash, gives back every record not marked done, in order, with its timestamp, and deletes the files once those are done', () => {
    const d = dir();
    const first = open(d).journal;
    const ids = ['a', 'b', 'c', 'd'].map((t, i) => first.append(batch(t, 2), 1_000 + i));
    first.done(ids[1]!); // b done and marked
    first.flushMarks();
    first.done(ids[2]!); // c done, its mark not yet written: a crash now
    // A new process in the slot.
    const { journal } = open(d);
    expect(journal.recovering).toBe(true);
    const again = recovered(journal);
    expect(again.map((r) => [r.keys[0], r.timestamp])).toEqual([
      ['a-0', 1_000],
      ['c-0', 1_002],
      ['d-0', 1_003],
    ]);
    expect(journal.recovering).toBe(false);
    for (const r of again) journal.done(r.entry);
    // No records left: the recovered segment and its marks are deleted (an earlier process's file is
    // never kept as a spare); the slot's reservation of segment numbers stays.
    expect(names(d)).toEqual(['slot-0.000000001000.next']);
    expect(journal.bytes).toBe(0);
  });

  it('never numbers a segment as one before it, even once every file was deleted: its numbers are reserved on the disk', () => {
    const d = dir();
    const { journal: first } = open(d, { mapSegments: false, segmentBytes: 4096 });
    for (let i = 0; i < 5; i++) first.done(first.append(batch(`x${i}`, 20), 1)); // a segment each
    first.close();
    const listed = () => names(d).sort();
    // Every segment done and deleted: nothing left but the reservation (segments 0 to 4 were used).
    for (const n of listed().filter((n) => !n.endsWith('.next'))) unlinkSync(join(d, n));
    // A new process goes on above everything the reservation says may have been used.
    const { journal } = open(d, { mapSegments: false });
    journal.append(batch('after', 1), 2);
    journal.close();
    expect(listed()).toEqual(['slot-0.000000001000.wal', 'slot-0.000000002000.next']);
    // And the next one above that: the reservation is renamed on, and the directory synced, first.
    const { journal: third } = open(d, { mapSegments: false, segmentBytes: 1 });
    third.append(batch('later', 1), 3);
    expect(listed()).toEqual(['slot-0.000000001000.wal', 'slot-0.000000002000.wal', 'slot-0.000000003000.next']);
  });

  it('writes over a spare segment, and reads back only the records of its new use, not those left of the old one', () => {
    const d = dir();
    const first = open(d).journal;
    // Two records of 0.6 MB, acknowledged: the segment, done and over 1 MiB, is kept as a spare.
    const big = batch('old', 6000);
    for (const r of [first.append(big, 1), first.append(big, 1)]) first.done(r);
    expect(readdirSync(d).filter((n) => n.endsWith('.spare'))).toHaveLength(1);
    expect(readdirSync(d).filter((n) => n.endsWith('.wal'))).toEqual([]);
    // The next process writes its segment over that spare: two small records over the old big ones.
    const second = open(d).journal;
    second.append(batch('next-a', 1), 3);
    second.append(batch('next-b', 1), 4);
    expect(readdirSync(d).filter((n) => n.endsWith('.spare'))).toEqual([]);
    const { journal, corrupt } = open(d);
    // Counted at open without the old use's records (the metrics, and what the limit holds).
    expect([journal.records, journal.bytes]).toEqual([2, recordBytes(batch('next-a', 1)) + recordBytes(batch('next-b', 1))]);
    expect(recovered(journal).map((r) => r.keys[0])).toEqual(['next-a-0', 'next-b-0']);
    expect([journal.damagedRecords, corrupt]).toEqual([0, []]);
  });

  it("counts at open only the records of a segment's own number, not those of the spare it was written over (the metrics and the limit)", () => {
    const d = dir();
    const first = open(d).journal;
    // Two records of 0.6 MB, acknowledged: the segment, done and over 1 MiB, is kept as a spare.
    const old = batch('old', 6000);
    for (const r of [first.append(old, 1), first.append(old, 1)]) first.done(r);
    // The same process writes one record of the same size over it (the old second record stays whole
    // after it), then crashes.
    first.append(batch('new', 6000), 2);
    expect(readdirSync(d).filter((n) => n.endsWith('.spare'))).toEqual([]);
    const { journal } = open(d);
    expect([journal.records, journal.bytes]).toEqual([1, recordBytes(old)]);
    expect(recovered(journal).map((r) => r.keys[0])).toEqual(['new-0']);
    expect(journal.records).toBe(1); // in flight now, until Kafka has it
  });

  it('has slot 0 take the files of slots that no longer exist (fewer WORKERS), and no other slot', () => {
    const d = dir();
    for (const slot of [0, 1, 2]) open(d, { slot, slots: 3 }).journal.append(batch(`s${slot}`, 1), slot);
    expect(recovered(open(d, { slot: 0, slots: 2 }).journal).map((r) => r.keys[0])).toEqual(['s0-0', 's2-0']);
    expect(recovered(open(d, { slot: 1, slots: 2 }).journal).map((r) => r.keys[0])).toEqual(['s1-0']);
  });

  it('starts a new segment past its size and deletes a segment once every record in it is done', () => {
    const d = dir();
    const { journal } = open(d);
    const big = batch('big', 5000); // about 0.5 MB a record
    const per = Math.floor(SEGMENT_MAX_BYTES / recordBytes(big));
    const records = Array.from({ length: per + 2 }, () => journal.append(big, 1));
    expect(readdirSync(d).filter((n) => n.endsWith('.wal'))).toHaveLength(2);
    for (const r of records.slice(0, per)) journal.done(r);
    expect(readdirSync(d).filter((n) => n.endsWith('.wal'))).toHaveLength(1);
    expect(journal.bytes).toBe(2 * recordBytes(big));
  });

  it('refuses a record that does not fit under its limit (fits), and says the disk refused one (JournalError), keeping nothing of it', () => {
    const d = dir();
    const { journal } = open(d, { maxBytes: 1024 * 1024 });
    expect(journal.fits(1024 * 1024)).toBe(true);
    journal.append(batch('a', 1), 1);
    expect(journal.fits(1024 * 1024)).toBe(false);
    // A disk that takes nothing: the active segment's file swapped for /dev/full (every write ENOSPC).
    // (A mapped segment is allocated whole when it starts: where the disk cannot give that, the
    // journal writes as here; the tmpfs test of test/integration/journal.test.ts shows it.)
    const full = open(dir(), { mapSegments: false }).journal;
    (full as unknown as { activeFor(bytes: number): { fd: number } }).activeFor(100).fd = openSync('/dev/full', 'w');
    expect(() => full.append(batch('x', 1), 1)).toThrow(JournalError);
    // Refused for room: nothing kept, and the journal takes records again once the disk has room.
    expect(full.noRoom?.message).toMatch(/ENOSPC/);
    expect([full.records, full.failure]).toEqual([0, null]);
  });

  it('skips a damaged record (its body check) and reads on; counts a torn end; never throws', () => {
    const d = dir();
    // Written with pwritev: the file is its records alone, a third of it each.
    const { journal: first } = open(d, { mapSegments: false });
    for (const t of ['a', 'b', 'c']) first.append(batch(t, 2), 7);
    const file = join(d, segments(d)[0]!);
    const size = statSync(file).size;
    const one = size / 3;
    // Flip a byte of b's data; then a torn record at the end (the head of one, cut short by a crash).
    const bytes = readFileSync(file);
    bytes[one + one - 3] = bytes[one + one - 3]! ^ 0xff;
    writeFileSync(file, bytes);
    appendFileSync(file, bytes.subarray(0, 30));
    const { journal, corrupt } = open(d);
    expect(recovered(journal).map((r) => r.keys[0])).toEqual(['a-0', 'c-0']);
    expect(journal.damagedRecords).toBe(2);
    expect(corrupt[0]).toMatch(new RegExp(`^${one}: record 1: its body's checksum does not match`));
    expect(corrupt[1]).toMatch(new RegExp(`^${size}: 1 record\\(s\\) from index 3 cannot be read`));
    // A file cut in the middle of its second record (a full disk): the records before it.
    truncateSync(file, one + 10);
    const cut = open(d);
    expect(recovered(cut.journal).map((r) => r.keys[0])).toEqual(['a-0']);
    expect(cut.journal.damagedRecords).toBe(1);
  });

  it('leaves no damage when its process is killed between two copies of a record into the mapping: the record is there whole, or not at all', () => {
    // The copy numbered `killedAt` and those after it never happen; past the last copy, the append is whole.
    for (let killedAt = 0; ; killedAt++) {
      const d = dir();
      if (mappableFileSystem(d) === null) return; // no mapping here: pwritev writes a record in one call
      const { journal: first } = open(d, { mapSegments: true });
      const map = ['a', 'b', 'c'].map((t) => first.append(batch(t, 3), 7))[0]!.segment.map!;
      let copies = 0;
      map.set = function (this: Uint8Array, ...args: Parameters<Uint8Array['set']>) {
        if (copies++ === killedAt) throw new Error('killed');
        Uint8Array.prototype.set.apply(this, args);
      };
      let killed = false;
      try {
        first.append(batch('d', 3), 8);
      } catch {
        killed = true;
      }
      const { journal, corrupt } = open(d);
      expect(recovered(journal).map((r) => r.keys[0])).toEqual(killed ? ['a-0', 'b-0', 'c-0'] : ['a-0', 'b-0', 'c-0', 'd-0']);
      expect([corrupt, journal.damagedRecords], `killed at copy ${killedAt}`).toEqual([[], 0]);
      if (!killed) return;
    }
  });

  it('counts a record whose header is damaged, whichever byte of it, as that record alone: the 999 others of its segment come back (and the log says where)', () => {
    const d = dir();
    const { journal: first } = open(d, { mapSegments: false });
    for (let i = 0; i < 1000; i++) first.append(batch(`r${i}`, 1 + (i % 3)), 1_000 + i);
    first.close();
    const file = join(d, segments(d)[0]!);
    const pristine = readFileSync(file);
    const starts = scan(pristine).map((item) => item.at);
    expect(starts).toHaveLength(1000);
    let flips = 0;
    for (const victim of [0, 1, 500, 998, 999]) {
      for (let byte = 0; byte < 40; byte++) {
        for (const mask of [0x01, 0xff]) {
          const damaged = Buffer.from(pristine);
          damaged[starts[victim]! + byte]! ^= mask;
          writeFileSync(file, damaged);
          const { journal, corrupt } = open(d, { mapSegments: false });
          const back = recovered(journal).map((r) => r.keys[0]);
          const what = `record ${victim}, header byte ${byte} ^ ${mask}`;
          expect(journal.damagedRecords, what).toBe(1);
          expect(back, what).toHaveLength(999);
          expect(back.includes(`r${victim}-0`), what).toBe(false);
          expect(corrupt, what).toHaveLength(1);
          expect(corrupt[0]!.startsWith(`${starts[victim]}: `), `${what}: ${corrupt[0]}`).toBe(true);
          flips++;
        }
      }
    }
    expect(flips).toBe(400);
  });

  it('counts every record a damaged stretch took, from the indexes of the records around it', () => {
    const d = dir();
    const { journal: first } = open(d, { mapSegments: false });
    for (let i = 0; i < 10; i++) first.append(batch(`r${i}`, 1), i);
    first.close();
    const file = join(d, segments(d)[0]!);
    const bytes = readFileSync(file);
    const starts = scan(bytes).map((item) => item.at);
    // Records 3 to 5 overwritten with garbage, as a bad sector would leave them.
    bytes.fill(0xa5, starts[3], starts[6]);
    writeFileSync(file, bytes);
    const { journal, corrupt } = open(d);
    expect(recovered(journal).map((r) => r.keys[0])).toEqual(['r0-0', 'r1-0', 'r2-0', 'r6-0', 'r7-0', 'r8-0', 'r9-0']);
    expect(journal.damagedRecords).toBe(3);
    expect(corrupt).toEqual([expect.stringMatching(new RegExp(`^${starts[3]}: 3 record\\(s\\) of this segment cannot be read`))]);
  });

  it('reads the spill files of an earlier version where they are, as records to produce again, and removes each once its records are done', () => {
    const d = dir();
    const legacy = (key: string, value: string, ts: number) => {
      const body = Buffer.alloc(16 + key.length + value.length);
      body.writeUInt32LE(key.length, 0);
      body.writeUInt32LE(value.length, 4);
      body.writeDoubleLE(ts, 8);
      body.write(key, 16);
      body.write(value, 16 + key.length);
      const crc = Buffer.alloc(4);
      crc.writeUInt32LE(crc32(body), 0);
      return Buffer.concat([crc, body]);
    };
    writeFileSync(join(d, 'worker-0.000000000003.spill'), Buffer.concat([legacy('k1', '{"v":1}', 11), legacy('k2', '{"v":2}', 12)]));
    const { journal } = open(d);
    const again = journal.nextRecovered(10);
    expect(
      again.map((r) => [keys(r.record)[0], r.record.timestamp, Buffer.from(r.record.data.subarray(r.record.messages[0], r.record.messages[1])).toString()]),
    ).toEqual([
      ['k1', 11, '{"v":1}'],
      ['k2', 12, '{"v":2}'],
    ]);
    // Still there until Kafka has both: a crash now produces them again, from the same file.
    expect(readdirSync(d).filter((n) => n.endsWith('.spill'))).toEqual(['worker-0.000000000003.spill']);
    journal.done(again[0]!.entry);
    journal.flushMarks();
    expect(names(d).filter((n) => !n.endsWith('.spill'))).toEqual([]); // a spill file gets no marks
    journal.done(again[1]!.entry);
    expect(readdirSync(d).some((n) => n.endsWith('.spill'))).toBe(false);
  });

  it('answers afterCommit once the records are on the disk in JOURNAL_SYNC=disk mode, one fdatasync for every record that came meanwhile', async () => {
    const d = dir();
    const { journal } = open(d, { sync: 'disk' });
    const order: string[] = [];
    journal.append(batch('a', 1), 1);
    journal.afterCommit(() => order.push('a'));
    journal.append(batch('b', 1), 2);
    journal.afterCommit(() => order.push('b'));
    expect(order).toEqual([]); // not before the sync
    await new Promise((r) => setTimeout(r, 200));
    expect(order).toEqual(['a', 'b']);
    const processMode = open(dir()).journal;
    let now = false;
    processMode.afterCommit(() => (now = true));
    expect(now).toBe(true);
  });

  it('syncs a segment that Kafka finished while its fdatasync still waited (JOURNAL_SYNC=disk): the requests of that commit are not refused', async () => {
    const d = dir();
    const { journal } = open(d, { sync: 'disk' });
    const busy = holdThreadpool(); // the fdatasyncs wait behind it
    const big = batch('big', 10_000); // about 1.2 MB: past the size at which a segment all done is rolled over
    const r = journal.append(big, 1);
    const committed = new Promise<Error | null>((resolve) => journal.afterCommit(resolve));
    journal.done(r); // all done: the segment is sealed now, its fdatasync not yet run
    expect(await committed).toBeNull();
    await busy;
  });

  it("syncs a record appended while its segment's fdatasync waited, when Kafka finishes the segment before the next commit (JOURNAL_SYNC=disk)", async () => {
    const d = dir();
    const { journal } = open(d, { sync: 'disk' });
    const busy = holdThreadpool(); // the fdatasyncs wait behind it
    const big = batch('big', 10_000);
    const first = journal.append(big, 1);
    // What the process has open the moment the first commit ends, before the second starts.
    let openThen: string[] = [];
    const firstCommit = new Promise<Error | null>((resolve) =>
      journal.afterCommit((err) => {
        openThen = openFiles();
        resolve(err);
      }),
    ); // its fdatasync waits
    const small = batch('small', 1);
    const second = journal.append(small, 2); // the same segment, for the next commit
    const secondCommit = new Promise<Error | null>((resolve) => journal.afterCommit(resolve));
    journal.done(first);
    journal.done(second); // all done: sealed while the first commit waits
    expect(await firstCommit).toBeNull();
    // Closed at the end of the first commit, the second's fdatasync would fail (EBADF: a 500 for a
    // request whose points were taken) or sync whatever file took the number, leaving this one unsynced.
    expect(openThen.filter((f) => f.startsWith(d) && !f.endsWith('.lock'))).toHaveLength(1);
    expect(await secondCommit).toBeNull();
    await busy;
  });

  it('makes one fdatasync for the requests of a sync interval: the first at once, the next no sooner than the interval after it (JOURNAL_SYNC=disk)', async () => {
    const d = dir();
    const { journal } = open(d, { sync: 'disk', syncIntervalMs: 200 });
    const commit = () => new Promise<number>((resolve) => journal.afterCommit((err) => (err === null ? resolve(performance.now()) : resolve(NaN))));
    const start = performance.now();
    journal.append(batch('a', 1), 1);
    const first = await commit();
    expect(first - start).toBeLessThan(190); // not held back: no commit before it
    journal.append(batch('b', 1), 2);
    const second = commit();
    journal.append(batch('c', 1), 3);
    const third = commit();
    const [b, c] = await Promise.all([second, third]);
    expect(b - start).toBeGreaterThanOrEqual(195); // timers fire no sooner (within their 1 ms rounding)
    expect(c - start).toBeLessThan(390); // the same commit: a commit of its own would come another 200 ms later
    journal.close();
  });

  it("reports each group commit's duration, one per commit (JOURNAL_SYNC=disk): the metric of the disk's share of a 202", async () => {
    const durations: number[] = [];
    const { journal } = open(dir(), { sync: 'disk', onCommit: (s) => durations.push(s) });
    const commit = () => new Promise((resolve) => journal.afterCommit(resolve));
    journal.append(batch('a', 1), 1);
    journal.append(batch('b', 1), 2);
    await Promise.all([commit(), commit()]); // one commit for both
    journal.append(batch('c', 1), 3);
    await commit();
    expect(durations).toHaveLength(2);
    for (const d of durations) expect(d).toBeGreaterThan(0);
    journal.close();
  });

  it('on close, commits what waits for the sync interval and answers it, rather than leaving those requests unanswered (JOURNAL_SYNC=disk)', async () => {
    const d = dir();
    const { journal } = open(d, { sync: 'disk', syncIntervalMs: 60_000 });
    journal.append(batch('a', 1), 1);
    await new Promise((resolve) => journal.afterCommit(resolve));
    journal.append(batch('b', 1), 2);
    let answer: Error | null | undefined;
    journal.afterCommit((err) => (answer = err)); // held back a minute by the interval
    expect(answer).toBeUndefined();
    journal.close();
    expect(answer).toBeNull();
  });

  it('on close, answers a commit still under way with the outcome of its own sync, not the EBADF of files it closed (JOURNAL_SYNC=disk)', async () => {
    const d = dir();
    const { journal } = open(d, { sync: 'disk' });
    const busy = holdThreadpool(); // the fdatasyncs wait behind it
    journal.append(batch('a', 1), 1);
    const underWay = new Promise<Error | null>((resolve) => journal.afterCommit(resolve)); // its fdatasync waits for the threadpool
    journal.close();
    expect(await underWay).toBeNull();
    await busy;
  });

  it('refuses a directory it cannot create, naming JOURNAL_DIR', () => {
    const file = join(dir(), 'a-file');
    writeFileSync(file, '');
    const claim = { slot: 0, slots: new Set([0]) }; // the lock could not be taken there either: the primary stops first (exit 2)
    expect(() => new Journal({ dir: join(file, 'journal'), claim, maxBytes: 1 << 26, sync: 'process' })).toThrow(
      /cannot use the journal directory .*a-file\/journal \(JOURNAL_DIR\)/,
    );
  });
});
