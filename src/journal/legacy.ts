// Every file format of an earlier version that the journal still reads, so that an upgrade produces
// what the version before left: one module, to be deleted with the versions it reads once none is
// left in the field (and the calls to it in journal.ts and slot-files.ts with it).
//
//   - records "TIJ1" (zlib's CRC-32) and "TIJ2" (CRC-32C): one check over all but a 12-byte prefix,
//     no head check and no index, so a damaged length or magic ends the reading of the segment there;
//       magic u32 | crc u32 | length u32 | count u32 | segment u32 | 0 u32 | timestamp f64 | offsets | data
//   - `.acks` marks: bare u32 indexes, no check;
//   - spill files `worker-<slot>.<seq>.spill`, of the version before the journal: records that failed
//     after their 202, one point each.
import { crc32 } from 'node:zlib';
import { crc32c } from './native.js';
import type { JournalRecord, SegmentItem } from './record.js';

const MAGIC_V1 = 0x314a4954;
const MAGIC_V2 = 0x324a4954;
const PREFIX_BYTES = 12;
const HEADER_BYTES = 32;

/** Whether a segment file starts with a record of an earlier version. */
export function isLegacySegment(buf: Buffer): boolean {
  if (buf.byteLength < 4) return false;
  const magic = buf.readUInt32LE(0);
  return magic === MAGIC_V1 || magic === MAGIC_V2;
}

/** The bytes of the earlier-version record whose first 32 bytes are `header`, or null where none of segment `seq` starts. */
export function legacyRecordBytes(header: Buffer, seq: number): number | null {
  const magic = header.readUInt32LE(0);
  if ((magic !== MAGIC_V1 && magic !== MAGIC_V2) || header.readUInt32LE(16) !== seq) return null;
  return PREFIX_BYTES + header.readUInt32LE(8);
}

/**
 * The records of an earlier version's segment, as that version read them: a record whose CRC does
 * not match is skipped by its length; bytes that are no record of this segment end the reading, and a
 * length no record could have ends it counted. Their indexes are their places in the file.
 */
export function* scanLegacySegment(buf: Buffer, seq: number): Generator<SegmentItem> {
  let at = 0;
  let index = 0;
  while (at + HEADER_BYTES <= buf.byteLength) {
    const total = legacyRecordBytes(buf.subarray(at, at + HEADER_BYTES), seq);
    if (total === null) return; // the end of this segment's records (a spare's earlier records may follow)
    const count = buf.readUInt32LE(at + 12);
    if (total < HEADER_BYTES + 16 * count || at + total > buf.byteLength) {
      yield {
        kind: 'damaged',
        at,
        records: 1,
        what: `${buf.byteLength - at} bytes that are not a whole record (a write cut short); the file is read up to them`,
      };
      return;
    }
    const body = buf.subarray(at + PREFIX_BYTES, at + total);
    const crc = buf.readUInt32LE(at) === MAGIC_V2 ? crc32c(body) : crc32(body);
    const record = crc === buf.readUInt32LE(at + 4) ? readLegacyBody(buf, at, total, count) : null;
    if (record === null) yield { kind: 'damaged', at, records: 1, what: 'a record whose checksum does not match; skipped' };
    else yield { kind: 'record', at, index, record };
    at += total;
    index++;
  }
  if (at < buf.byteLength) {
    yield {
      kind: 'damaged',
      at,
      records: 1,
      what: `${buf.byteLength - at} bytes that are not a whole record (a write cut short); the file is read up to them`,
    };
  }
}

function readLegacyBody(buf: Buffer, at: number, total: number, count: number): JournalRecord | null {
  const offsetsAt = at + HEADER_BYTES;
  const dataAt = offsetsAt + 16 * count;
  const messages = new Uint32Array(4 * count);
  Buffer.from(messages.buffer).set(buf.subarray(offsetsAt, dataAt));
  const data = Buffer.from(buf.subarray(dataAt, at + total));
  for (let i = 0; i < 4 * count; i++) if (messages[i]! > data.byteLength) return null;
  return { count, data, messages, timestamp: buf.readDoubleLE(at + 24) };
}

// ---- marks ------------------------------------------------------------------------------------

export const LEGACY_MARKS_SUFFIX = '.acks';

/** The indexes of an `.acks` file: bare u32s. */
export function decodeLegacyMarks(buf: Buffer): Set<number> {
  const done = new Set<number>();
  for (let at = 0; at + 4 <= buf.byteLength; at += 4) done.add(buf.readUInt32LE(at));
  return done;
}

// ---- spill files --------------------------------------------------------------------------------

/** A spill file of the version before the journal: `worker-<slot>.<seq>.spill`. */
export const SPILL_FILE_RE = /^worker-(\d+)\.(\d{12})\.spill$/;

/**
 * The records of a spill file, one point each, as segment items (indexes are their places in the file):
 * u32 crc32 | u32 key length | u32 value length | f64 timestamp | key | value (the CRC covers all after it).
 * A record whose CRC does not match ends the reading, counted, as the version that wrote them read them.
 */
export function* readSpillFile(buf: Buffer): Generator<SegmentItem> {
  let at = 0;
  let index = 0;
  while (at + 20 <= buf.byteLength) {
    const keyLen = buf.readUInt32LE(at + 4);
    const valueLen = buf.readUInt32LE(at + 8);
    const end = at + 20 + keyLen + valueLen;
    if (end > buf.byteLength) break;
    if (buf.readUInt32LE(at) !== crc32(buf.subarray(at + 4, end))) {
      yield { kind: 'damaged', at, records: 1, what: 'a spill record whose checksum does not match; the file is read up to it' };
      return;
    }
    // value then key, as produceBatch takes them: one message.
    const data = Buffer.concat([buf.subarray(at + 20 + keyLen, end), buf.subarray(at + 20, at + 20 + keyLen)]);
    yield {
      kind: 'record',
      at,
      index: index++,
      record: { count: 1, data, messages: Uint32Array.of(0, valueLen, valueLen, valueLen + keyLen), timestamp: buf.readDoubleLE(at + 12) },
    };
    at = end;
  }
  if (at < buf.byteLength) yield { kind: 'damaged', at, records: 1, what: 'a torn spill record at the end of the file' };
}
