import { appendFileSync, mkdtempSync, readdirSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SpillJournal, type SpillRecord } from '../../../src/kafka/spill-journal.js';

const dir = () => mkdtempSync(join(tmpdir(), 'journal-test-'));
const open = (d: string, over: Partial<ConstructorParameters<typeof SpillJournal>[0]> = {}) =>
  new SpillJournal({ dir: d, slot: 0, slots: 1, maxBytes: 1024 * 1024, ...over });

function readAll(j: SpillJournal, file: string): SpillRecord[] {
  return [...j.read(file)].flat();
}

const rec = (i: number) => ({ key: Buffer.from(`MSCU${i}`), value: Buffer.from(JSON.stringify({ seq: i, pad: 'x'.repeat(i % 50) })), timestamp: 1_700_000_000_000 + i });

describe('spill journal', () => {
  it('keeps records in order across a restart, with key, value and timestamp', () => {
    const d = dir();
    const a = open(d);
    for (let i = 0; i < 1000; i++) expect(a.append(rec(i).key, rec(i).value, rec(i).timestamp)).toBe(true);
    a.close();
    const b = open(d); // the next run of the same slot
    expect(b.isEmpty).toBe(false);
    const files = b.seal();
    expect(files).toHaveLength(1);
    const back = readAll(b, files[0]!);
    expect(back.map((r) => r.key.toString())).toEqual(Array.from({ length: 1000 }, (_, i) => `MSCU${i}`));
    expect(back[999]!.value.toString()).toBe(rec(999).value.toString());
    expect(back[999]!.timestamp).toBe(rec(999).timestamp);
    b.remove(files[0]!);
    expect(b.isEmpty).toBe(true);
    expect(readdirSync(d)).toEqual([]);
  });

  it('writes appends in a batch, on disk after the flush interval without an explicit flush', async () => {
    const d = dir();
    const j = open(d);
    j.append(rec(1).key, rec(1).value, rec(1).timestamp);
    expect(readdirSync(d)).toEqual([]); // not yet written
    await new Promise((r) => setTimeout(r, 100));
    const [name] = readdirSync(d);
    expect(statSync(join(d, name!)).size).toBe(j.bytes);
  });

  it('refuses a record that would pass SPILL_MAX_BYTES and keeps what fit', () => {
    const d = dir();
    const j = open(d, { maxBytes: 1024 * 1024 });
    const big = Buffer.alloc(300 * 1024, 1);
    expect(j.append(Buffer.from('k'), big, 0)).toBe(true);
    expect(j.append(Buffer.from('k'), big, 0)).toBe(true);
    expect(j.append(Buffer.from('k'), big, 0)).toBe(true);
    expect(j.append(Buffer.from('k'), big, 0)).toBe(false);
    expect(j.bytes).toBeLessThanOrEqual(j.capacity);
    j.close();
    expect(readAll(open(d), open(d).seal()[0]!)).toHaveLength(3);
  });

  it('stops at a torn last record and says where', () => {
    const d = dir();
    const a = open(d);
    for (let i = 0; i < 10; i++) a.append(rec(i).key, rec(i).value, rec(i).timestamp);
    a.close();
    const [name] = readdirSync(d);
    const path = join(d, name!);
    truncateSync(path, statSync(path).size - 5); // a crash in the middle of the last write
    const torn: number[] = [];
    const b = open(d, { onCorrupt: (_f, valid, size) => torn.push(valid, size) });
    expect(readAll(b, b.seal()[0]!).map((r) => r.key.toString())).toEqual(Array.from({ length: 9 }, (_, i) => `MSCU${i}`));
    expect(torn[0]).toBeLessThan(torn[1]!);
  });

  it('stops at a record whose checksum does not match', () => {
    const d = dir();
    const a = open(d);
    for (let i = 0; i < 3; i++) a.append(rec(i).key, rec(i).value, rec(i).timestamp);
    a.close();
    const [name] = readdirSync(d);
    appendFileSync(join(d, name!), Buffer.alloc(40, 7)); // garbage after the good records
    let corrupt = 0;
    const b = open(d, { onCorrupt: () => corrupt++ });
    expect(readAll(b, b.seal()[0]!)).toHaveLength(3);
    expect(corrupt).toBe(1);
  });

  it('reads records larger than its read buffer', () => {
    const d = dir();
    const a = open(d, { maxBytes: 64 * 1024 * 1024 });
    const huge = Buffer.alloc(9 * 1024 * 1024, 65);
    a.append(Buffer.from('a'), huge, 1);
    a.append(Buffer.from('b'), Buffer.from('small'), 2);
    a.close();
    const b = open(d, { maxBytes: 64 * 1024 * 1024 });
    const back = readAll(b, b.seal()[0]!);
    expect(back.map((r) => r.value.byteLength)).toEqual([huge.byteLength, 5]);
  });

  it('gives each slot its own files; slot 0 adopts the files of slots that no longer exist', () => {
    const d = dir();
    for (const slot of [0, 1, 2]) {
      const j = open(d, { slot, slots: 3 });
      j.append(Buffer.from(`slot${slot}`), Buffer.from('v'), 0);
      j.close();
    }
    const slot1 = open(d, { slot: 1, slots: 2 });
    expect(slot1.seal().map((f) => readAll(slot1, f)[0]!.key.toString())).toEqual(['slot1']);
    const slot0 = open(d, { slot: 0, slots: 2 }); // restarted with WORKERS=2: slot 2 is gone
    expect(slot0.seal().map((f) => readAll(slot0, f)[0]!.key.toString())).toEqual(['slot0', 'slot2']);
  });

  it('appends after a seal go to a new file, replayed after the older ones', () => {
    const d = dir();
    const j = open(d);
    j.append(Buffer.from('first'), Buffer.from('v'), 0);
    const sealed = j.seal();
    j.append(Buffer.from('second'), Buffer.from('v'), 0);
    j.flush();
    expect(readdirSync(d)).toHaveLength(2);
    j.remove(sealed[0]!);
    const files = j.seal();
    expect(files).toHaveLength(1);
    expect(readAll(j, files[0]!)[0]!.key.toString()).toBe('second');
  });

  it('ignores files that are not journal files and removes empty ones', () => {
    const d = dir();
    writeFileSync(join(d, 'notes.txt'), 'hello');
    writeFileSync(join(d, 'worker-0.000000000007.spill'), '');
    const j = open(d);
    expect(j.isEmpty).toBe(true);
    expect(readdirSync(d)).toEqual(['notes.txt']);
  });

  it('names the directory when it cannot be used', () => {
    const d = dir();
    writeFileSync(join(d, 'file'), 'x');
    expect(() => open(join(d, 'file', 'sub'))).toThrow(/cannot use spill directory .*file\/sub \(SPILL_DIR\)/);
  });
});
