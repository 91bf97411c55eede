// The journal's addon (native/journal-files, through src/journal/native.ts) against what it must equal:
// CRC-32C against a JavaScript twin of the algorithm (RFC 3720, appendix B.4), and a mapped segment
// against the file read through Node's fs.
import { closeSync, mkdtempSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { crc32c, mappableFileSystem, mapSegment, unmapSegment } from '../../../src/journal/native.js';

/** CRC-32C, bit by bit: the twin the native table and instruction are held to. */
function crc32cTwin(...parts: Uint8Array[]): number {
  let crc = 0xffffffff;
  for (const part of parts) {
    for (const byte of part) {
      crc ^= byte;
      for (let k = 0; k < 8; k++) crc = crc & 1 ? (crc >>> 1) ^ 0x82f63b78 : crc >>> 1;
    }
  }
  return (crc ^ 0xffffffff) >>> 0;
}

const addon = createRequire(import.meta.url)('@track-ingest/journal-files') as { hardware: boolean; crc32c: (a: unknown, b?: unknown) => number };

describe('journal natives (native/journal-files)', () => {
  it('computes CRC-32C: the check value of RFC 3720 and every input as the JavaScript twin does, in one part or two', () => {
    expect(crc32c(Buffer.from('123456789')).toString(16)).toBe('e3069283');
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 600 }), fc.uint8Array({ maxLength: 600 }), (a, b) => {
        expect(crc32c(a)).toBe(crc32cTwin(a));
        expect(crc32c(a, b)).toBe(crc32cTwin(a, b));
        // A view into a larger buffer, as the journal passes the head of its scratch buffer.
        const big = Buffer.concat([Buffer.from([1, 2, 3]), a, Buffer.from([4])]);
        expect(crc32c(big.subarray(3, 3 + a.byteLength))).toBe(crc32cTwin(a));
      }),
      { numRuns: 300 },
    );
    expect(typeof addon.hardware).toBe('boolean');
  });

  it('refuses what is not a Uint8Array with a TypeError naming the call, rather than reading memory it was not given', () => {
    expect(() => addon.crc32c('text')).toThrow(/crc32c takes one or two Uint8Arrays/);
    expect(() => addon.crc32c(new Uint16Array(4))).toThrow(TypeError);
    expect(() => addon.crc32c(new Uint8Array(1), 5)).toThrow(TypeError);
    expect(addon.crc32c(new Uint8Array(0), undefined)).toBe(0);
  });

  it.runIf(mappableFileSystem(tmpdir()) !== null)(
    'maps a segment shared with its file: what is copied in is in the file, allocated whole; unmapped, the view is empty',
    () => {
      const path = join(mkdtempSync(join(tmpdir(), 'native-')), 'segment');
      writeFileSync(path, '');
      const fd = openSync(path, 'r+');
      const map = mapSegment(fd, 1 << 20);
      expect(map).not.toBeNull();
      map!.set(Buffer.from('record'), 4096);
      const file = readFileSync(path);
      expect(file.byteLength).toBe(1 << 20);
      expect(file.subarray(4096, 4102).toString()).toBe('record');
      unmapSegment(map!);
      expect(map!.byteLength).toBe(0);
      unmapSegment(map!); // twice: nothing to unmap, no crash
      closeSync(fd);
    },
  );

  it('gives null, not a throw, when a segment cannot be allocated and mapped (a bad descriptor)', () => {
    expect(mapSegment(987654, 4096)).toBeNull();
  });
});
