// One record of the write-ahead journal: the messages of one accepted request, exactly as they are
// handed to produceBatch (the buffer of values and keys, four offsets per message), and the time the
// request was accepted (the messages' Kafka timestamp). Written before the request is answered 202.
//
//    0 magic u32 "TIJ3" │  8 bytes u32      the whole record │ 16 segment u32  │ 24 timestamp f64
//    4 head check u32   │ 12 count u32      messages         │ 20 index u32    │ 32 body check u32 │ 36 0 u32
//   40 offsets u32 × 4 × count │ data
//
// Little-endian. The offsets are relative to the start of `data`, as produceBatch takes them, so a
// record read back is produced as it is.
//
// Two checks, both CRC-32C (native.ts, with the CPU's instruction). The head check covers bytes 8 to
// 40, so a header is trusted, its length above all, only once it checks: a damaged length can no
// longer send the reader to a wrong place. The body check covers the offsets and the data.
//
// Each record carries its segment's number and its index in the segment (0, 1, 2...). The number
// tells a record of this segment from the records of a spare's earlier use left past the new ones
// (segment files are written over once done: journal.ts says why); the index tells a gap. A reader
// that meets bytes that are no record of its segment looks for the next one that is (at a magic, whole
// or damaged), as LevelDB's log reader resynchronises at its next block (doc/log_format.md):
// one damaged record costs that record, counted and reported with where it was, never the records
// after it (scanSegment).
//
// The formats of earlier versions ("TIJ1", "TIJ2": no head check, no index) are read by legacy.ts.
import { crc32c, sealRecord } from './native.js';

/** "TIJ3", little-endian: where a record begins. */
export const RECORD_MAGIC = 0x334a4954;
const MAGIC_FIRST_HALF = Buffer.from('TI', 'latin1');
const MAGIC_SECOND_HALF = Buffer.from('J3', 'latin1');
export const RECORD_HEADER_BYTES = 40;
/** Byte offsets of the header's fields. */
const AT = { check: 4, bytes: 8, count: 12, segment: 16, index: 20, timestamp: 24, bodyCheck: 32 } as const;

/** What a record holds: produceBatch's arguments and the messages' timestamp. */
export interface JournalBatch {
  readonly count: number;
  readonly data: Uint8Array;
  /** Four per message: value start and end, key start and end, within data. */
  readonly messages: Uint32Array;
}

export interface JournalRecord extends JournalBatch {
  /** When the request was accepted, ms since the epoch: the messages' Kafka timestamp. */
  readonly timestamp: number;
}

/** The record's size on disk for these messages. */
export function recordBytes(batch: JournalBatch): number {
  return RECORD_HEADER_BYTES + 16 * batch.count + batch.data.byteLength;
}

/**
 * The record's head, its header and offsets, written into `scratch` (grown when too small; the
 * caller keeps what is returned as its next scratch): the record is the head and the data, written
 * together (writev), the data not copied in JavaScript. Both checks are computed here, in one call.
 */
export function encodeHead(scratch: Buffer, batch: JournalBatch, timestamp: number, segment: number, index: number): Buffer {
  const headBytes = RECORD_HEADER_BYTES + 16 * batch.count;
  const buf = scratch.byteLength >= headBytes ? scratch : Buffer.allocUnsafe(Math.max(headBytes, 2 * scratch.byteLength));
  buf.writeUInt32LE(RECORD_MAGIC, 0);
  buf.writeUInt32LE(headBytes + batch.data.byteLength, AT.bytes);
  buf.writeUInt32LE(batch.count, AT.count);
  buf.writeUInt32LE(segment, AT.segment);
  buf.writeUInt32LE(index, AT.index);
  buf.writeDoubleLE(timestamp, AT.timestamp);
  buf.writeUInt32LE(0, 36);
  buf.set(new Uint8Array(batch.messages.buffer, batch.messages.byteOffset, 16 * batch.count), RECORD_HEADER_BYTES);
  sealRecord(buf, headBytes, batch.data);
  return buf;
}

/** A record's header, once its check holds. */
export interface RecordHeader {
  readonly bytes: number;
  readonly count: number;
  readonly segment: number;
  readonly index: number;
  readonly timestamp: number;
}

/** The header at `at` when a whole one is there and checks (its length is then believable), else null. */
export function readHeader(buf: Buffer, at: number): RecordHeader | null {
  if (buf.byteLength - at < RECORD_HEADER_BYTES || buf.readUInt32LE(at) !== RECORD_MAGIC) return null;
  if (crc32c(buf.subarray(at + AT.bytes, at + RECORD_HEADER_BYTES)) !== buf.readUInt32LE(at + AT.check)) return null;
  const bytes = buf.readUInt32LE(at + AT.bytes);
  const count = buf.readUInt32LE(at + AT.count);
  // A check that holds over a length no record could have: written so by a bug, never by a disk.
  if (bytes < RECORD_HEADER_BYTES + 16 * count) return null;
  return { bytes, count, segment: buf.readUInt32LE(at + AT.segment), index: buf.readUInt32LE(at + AT.index), timestamp: buf.readDoubleLE(at + AT.timestamp) };
}

/** The record whose header `h` is at `at`, whole in `buf`: its messages, or null when its body does not check. */
function readBody(buf: Buffer, at: number, h: RecordHeader): JournalRecord | null {
  const offsetsAt = at + RECORD_HEADER_BYTES;
  const dataAt = offsetsAt + 16 * h.count;
  const end = at + h.bytes;
  if (crc32c(buf.subarray(offsetsAt, end)) !== buf.readUInt32LE(at + AT.bodyCheck)) return null;
  // Copies: the reader's buffer is let go, and produceBatch wants the offsets aligned.
  const messages = new Uint32Array(4 * h.count);
  Buffer.from(messages.buffer).set(buf.subarray(offsetsAt, dataAt));
  const data = Buffer.from(buf.subarray(dataAt, end));
  for (let i = 0; i < 4 * h.count; i++) if (messages[i]! > data.byteLength) return null;
  return { count: h.count, data, messages, timestamp: h.timestamp };
}

/**
 * The record this process wrote at `at` of a mapped segment, as produceBatch takes it: its data a view
 * of the mapping, only its offsets copied (to be aligned). Not checked: the caller wrote those bytes.
 */
export function viewRecordAt(map: Uint8Array, at: number, count: number): JournalBatch {
  const offsetsAt = map.byteOffset + at + RECORD_HEADER_BYTES;
  const dataAt = offsetsAt + 16 * count;
  const bytes = Buffer.from(map.buffer, map.byteOffset + at, RECORD_HEADER_BYTES).readUInt32LE(AT.bytes);
  const messages = new Uint32Array(4 * count);
  new Uint8Array(messages.buffer).set(new Uint8Array(map.buffer, offsetsAt, 16 * count));
  return { count, data: new Uint8Array(map.buffer, dataAt, bytes - RECORD_HEADER_BYTES - 16 * count), messages };
}

/** The whole record at `at` in `buf`, when its header and body check; else null. */
export function readRecordAt(buf: Buffer, at: number): JournalRecord | null {
  const h = readHeader(buf, at);
  if (h === null || at + h.bytes > buf.byteLength) return null;
  return readBody(buf, at, h);
}

/** What reading a segment finds, in the order of the file. */
export type SegmentItem =
  | { kind: 'record'; at: number; index: number; record: JournalRecord }
  /** `records` records of this segment that cannot be read, the first of them (or where it was) at `at`. */
  | { kind: 'damaged'; at: number; records: number; what: string };

/**
 * Every record of segment `seq` in the file `buf`, and every damage met, in order. The records run
 * from index 0; where the bytes are no record of this segment, the reader looks for the next place
 * where one starts and checks, and a record found with a higher index than the next one due says how
 * many were lost between (each of them was written: a later index exists). Past the last record found,
 * each place that looks like the damaged header of a record of this segment counts the records it
 * shows lost (damagedHeadersAt); anything else there is the end:
 * zeros of a file allocated whole, a spare's earlier records (another segment's number), or a record
 * whose writing a crash cut off before its header, which was never answered.
 */
export function* scanSegment(buf: Buffer, seq: number): Generator<SegmentItem> {
  const end = buf.byteLength;
  let at = 0;
  let due = 0;
  /** Where the records stopped reading in a row (-1: they have not), and the places since that look like damaged headers. */
  let gapAt = -1;
  let suspects = 0;
  while (at < end) {
    const h = readHeader(buf, at);
    if (h !== null && h.segment === seq && h.index >= due) {
      if (h.index > due)
        yield {
          kind: 'damaged',
          at: gapAt,
          records: h.index - due,
          what: `${h.index - due} record(s) of this segment cannot be read (damaged; the next whole one, index ${h.index}, is at byte ${at})`,
        };
      gapAt = -1;
      suspects = 0;
      due = h.index + 1;
      if (at + h.bytes > end) {
        yield { kind: 'damaged', at, records: 1, what: `the file ends inside record ${h.index} (${end - at} of its ${h.bytes} bytes): a write cut short` };
        return;
      }
      const record = readBody(buf, at, h);
      if (record === null) yield { kind: 'damaged', at, records: 1, what: `record ${h.index}: its body's checksum does not match` };
      else yield { kind: 'record', at, index: h.index, record };
      at += h.bytes;
      continue;
    }
    if (gapAt < 0) gapAt = at;
    if (h === null) suspects += damagedHeadersAt(buf, at, seq, due + suspects, Math.floor((at - gapAt) / RECORD_HEADER_BYTES), suspects === 0 && at > gapAt);
    // The next place a header may start: a magic, whole or with one of its bytes damaged (its first
    // half "TI" or its second half "J3" is whole then).
    const byFirstHalf = buf.indexOf(MAGIC_FIRST_HALF, at + 1);
    const bySecondHalf = buf.indexOf(MAGIC_SECOND_HALF, at + 3);
    if (byFirstHalf < 0 && bySecondHalf < 0) break;
    at = byFirstHalf < 0 ? bySecondHalf - 2 : bySecondHalf < 0 ? byFirstHalf : Math.min(byFirstHalf, bySecondHalf - 2);
  }
  if (suspects > 0)
    yield {
      kind: 'damaged',
      at: gapAt,
      records: suspects,
      what: `${suspects} record(s) from index ${due} cannot be read (a damaged header), and no whole record of this segment follows`,
    };
}

/**
 * How many records of segment `seq` the bytes at `at`, which are no whole header that checks, show
 * lost: 0 when they do not look like a damaged header of this segment. A damaged header keeps two of
 * its magic, this segment's number and an index the bytes since the last whole record could reach (the
 * index `due`, or up to `roomFor` past it: as many headers as those bytes could hold), and is not
 * zeros; it then counts for the records up to its index. The first one found past the place where
 * the record due was to start (`pastGap`) counts that record too: records of a segment follow one
 * another, so one was there. A header cut short by the file's end counts by its magic alone.
 */
function damagedHeadersAt(buf: Buffer, at: number, seq: number, due: number, roomFor: number, pastGap: boolean): number {
  const left = Math.min(buf.byteLength - at, RECORD_HEADER_BYTES);
  if (left < 4) return 0;
  const magic = buf.readUInt32LE(at) === RECORD_MAGIC;
  const atLeast = pastGap ? 2 : 1;
  if (left < AT.index + 4) return magic ? atLeast : 0;
  let zeros = true;
  for (let i = 0; i < left && zeros; i++) zeros = buf[at + i] === 0;
  if (zeros) return 0;
  const segment = buf.readUInt32LE(at + AT.segment) === seq;
  const index = buf.readUInt32LE(at + AT.index);
  const reachable = index >= due && index - due <= roomFor;
  if (Number(magic) + Number(segment) + Number(reachable) < 2) return 0;
  return Math.max(atLeast, reachable ? index - due + 1 : 1);
}
