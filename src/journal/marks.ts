// The marks of a segment: which of its records are done (Kafka acknowledged every point of them), so
// that a restart does not produce them again. A file beside each segment, `slot-<slot>.<seq>.done`,
// appended to once per poll (journal.ts, flushMarks), never synced: a mark lost costs a duplicate.
//
//   index u32 | check u32      8 bytes a mark, little-endian; check = CRC-32C of (seq u32, index u32)
//
// The check is there because a mark is never synced: after a power cut its bytes may be torn or read
// as zeros (the file's size kept over data that was not), and a zero mark without a check said
// "record 0 is done": the power-cut test lost a record answered 202 that way (docs/reliability.md,
// "A power cut"). A mark that does not check is skipped: its record comes back, a duplicate, never a loss.
// The seq in the check ties a mark to its segment's number, not to a file that once had it.
// Earlier versions wrote `.acks` files of bare u32 indexes: legacy.ts reads them (an upgrade).
import { crc32c } from './native.js';

export const MARK_BYTES = 8;
export const MARKS_SUFFIX = '.done';

const scratch = Buffer.alloc(MARK_BYTES);

function check(seq: number, index: number): number {
  scratch.writeUInt32LE(seq, 0);
  scratch.writeUInt32LE(index, 4);
  return crc32c(scratch);
}

/** The marks of records `indexes` of segment `seq`, as they are appended to its marks file. */
export function encodeMarks(seq: number, indexes: readonly number[]): Buffer {
  const out = Buffer.allocUnsafe(MARK_BYTES * indexes.length);
  for (let i = 0; i < indexes.length; i++) {
    out.writeUInt32LE(indexes[i]!, MARK_BYTES * i);
    out.writeUInt32LE(check(seq, indexes[i]!), MARK_BYTES * i + 4);
  }
  return out;
}

/** The indexes a marks file of segment `seq` says are done; marks that do not check are skipped. */
export function decodeMarks(buf: Buffer, seq: number): Set<number> {
  const done = new Set<number>();
  for (let at = 0; at + MARK_BYTES <= buf.byteLength; at += MARK_BYTES) {
    const index = buf.readUInt32LE(at);
    const sum = buf.readUInt32LE(at + 4);
    if (sum === check(seq, index) && (index !== 0 || sum !== 0)) done.add(index);
  }
  return done;
}
