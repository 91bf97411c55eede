// One record of the write-ahead journal: the messages of one accepted request, exactly as they are
// handed to produceBatch (the buffer of values and keys, four offsets per message), and the time the
// request was accepted (the messages' Kafka timestamp). Written before the request is answered 202.
//
//   magic u32 | crc32 u32 | length u32 | count u32 | timestamp f64 | offsets u32 × 4 × count | data
//   └─ 12-byte prefix ──────────────────┘└── `length` bytes, covered by the CRC ───────────────────┘
//
// Little-endian. The offsets are relative to the start of `data`, as produceBatch takes them, so a
// record read back is produced as it is. The CRC (zlib's crc32, node:zlib) covers everything after
// the prefix: a record torn by a crash or a full disk, or damaged on disk, is detected and skipped.
import { crc32 } from 'node:zlib';

/** "TIJ1", little-endian: where a record begins. */
export const RECORD_MAGIC = 0x314a4954;
export const RECORD_PREFIX_BYTES = 12;
/** The prefix, the count and the timestamp: the bytes of a record before its offsets. */
export const RECORD_HEADER_BYTES = RECORD_PREFIX_BYTES + 4 + 8;

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
 * The record's header, into `header` (at least RECORD_HEADER_BYTES): the record is the header, the
 * offsets' bytes and the data, written together (writev), so nothing is copied in JavaScript.
 */
export function writeHeader(header: Buffer, batch: JournalBatch, timestamp: number, offsets: Uint8Array): void {
  const length = recordBytes(batch) - RECORD_PREFIX_BYTES;
  header.writeUInt32LE(RECORD_MAGIC, 0);
  header.writeUInt32LE(length, 8);
  header.writeUInt32LE(batch.count, 12);
  header.writeDoubleLE(timestamp, 16);
  const crc = crc32(batch.data, crc32(offsets, crc32(header.subarray(RECORD_PREFIX_BYTES, RECORD_HEADER_BYTES))));
  header.writeUInt32LE(crc, 4);
}

/** The offsets of a batch as bytes (a view, no copy). */
export function offsetBytes(batch: JournalBatch): Uint8Array {
  return new Uint8Array(batch.messages.buffer, batch.messages.byteOffset, 4 * 4 * batch.count);
}

/** What reading a record at some position found. */
export type ReadOutcome =
  | { kind: 'record'; record: JournalRecord; bytes: number }
  /** Not enough bytes here for the record that starts here: read more, or (at the end of a file) a torn record. */
  | { kind: 'short'; needs: number }
  /** A record whose CRC does not match, but whose length is believable: skip `bytes` and go on. */
  | { kind: 'corrupt'; bytes: number }
  /** Not a record here (no magic, or a length no record could have): nothing after it can be trusted. */
  | { kind: 'garbage' };

/**
 * Reads the record at `at` in `buf` (whose end may be short of the record). `fileLeft`: bytes of the
 * file from `at` to its end, which bounds a believable length. The record returned views `buf`.
 */
export function readRecord(buf: Buffer, at: number, fileLeft: number): ReadOutcome {
  const available = buf.byteLength - at;
  if (available < RECORD_HEADER_BYTES) return fileLeft < RECORD_HEADER_BYTES ? { kind: 'garbage' } : { kind: 'short', needs: RECORD_HEADER_BYTES };
  if (buf.readUInt32LE(at) !== RECORD_MAGIC) return { kind: 'garbage' };
  const length = buf.readUInt32LE(at + 8);
  const count = buf.readUInt32LE(at + 12);
  const total = RECORD_PREFIX_BYTES + length;
  if (length < RECORD_HEADER_BYTES - RECORD_PREFIX_BYTES + 16 * count || total > fileLeft) return { kind: 'garbage' };
  if (available < total) return { kind: 'short', needs: total };
  const body = buf.subarray(at + RECORD_PREFIX_BYTES, at + total);
  if (crc32(body) !== buf.readUInt32LE(at + 4)) return { kind: 'corrupt', bytes: total };
  const offsetsAt = at + RECORD_HEADER_BYTES;
  const dataAt = offsetsAt + 16 * count;
  // Copies: the reader's buffer is reused, and produceBatch wants the offsets aligned.
  const messages = new Uint32Array(4 * count);
  Buffer.from(messages.buffer).set(buf.subarray(offsetsAt, dataAt));
  const data = Buffer.from(buf.subarray(dataAt, at + total));
  for (let i = 0; i < 4 * count; i++) if (messages[i]! > data.byteLength) return { kind: 'corrupt', bytes: total };
  return { kind: 'record', record: { count, data, messages, timestamp: buf.readDoubleLE(at + 16) }, bytes: total };
}
