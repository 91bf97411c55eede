// One record of the write-ahead journal: the messages of one accepted request, exactly as they are
// handed to produceBatch (the buffer of values and keys, four offsets per message), and the time the
// request was accepted (the messages' Kafka timestamp). Written before the request is answered 202.
//
//   magic u32 | crc u32 | length u32 | count u32 | segment u32 | 0 u32 | timestamp f64 | offsets u32 × 4 × count | data
//   └─ 12-byte prefix ─────────────────┘└── `length` bytes, covered by the CRC ──────────────────────────────────┘
//
// Little-endian. The offsets are relative to the start of `data`, as produceBatch takes them, so a
// record read back is produced as it is. The CRC covers everything after the prefix: a record torn
// by a crash or a full disk, or damaged on disk, is detected and skipped. It is CRC-32C, computed
// with the CPU's instruction (native.ts), in records of magic "TIJ2"; the records of earlier versions
// ("TIJ1", zlib's CRC-32) are still read, so that an upgrade recovers what the version before left.
// `segment` is the sequence number of the segment file it was written into: segment files are
// reused once done (journal.ts says why), and a record of an earlier use, left past the end of the
// new records, is told apart from them by it.
import { crc32 } from 'node:zlib';
import { crc32c } from './native.js';

/** "TIJ2", little-endian: where a record begins (CRC-32C). */
export const RECORD_MAGIC = 0x324a4954;
/** "TIJ1": a record of an earlier version (zlib's CRC-32), read, never written. */
export const RECORD_MAGIC_V1 = 0x314a4954;
export const RECORD_PREFIX_BYTES = 12;
/** The prefix, the count, the segment and the timestamp: the bytes of a record before its offsets. */
export const RECORD_HEADER_BYTES = RECORD_PREFIX_BYTES + 4 + 4 + 4 + 8;

/** Whether a record starts with this u32. */
export const isRecordMagic = (word: number): boolean => word === RECORD_MAGIC || word === RECORD_MAGIC_V1;

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
 * together (writev), the data not copied in JavaScript. The CRC is computed over both here.
 */
export function encodeHead(scratch: Buffer, batch: JournalBatch, timestamp: number, segment: number): Buffer {
  const headBytes = RECORD_HEADER_BYTES + 16 * batch.count;
  const buf = scratch.byteLength >= headBytes ? scratch : Buffer.allocUnsafe(Math.max(headBytes, 2 * scratch.byteLength));
  buf.writeUInt32LE(RECORD_MAGIC, 0);
  buf.writeUInt32LE(recordBytes(batch) - RECORD_PREFIX_BYTES, 8);
  buf.writeUInt32LE(batch.count, 12);
  buf.writeUInt32LE(segment, 16);
  buf.writeUInt32LE(0, 20);
  buf.writeDoubleLE(timestamp, 24);
  buf.set(new Uint8Array(batch.messages.buffer, batch.messages.byteOffset, 16 * batch.count), RECORD_HEADER_BYTES);
  buf.writeUInt32LE(crc32c(buf.subarray(RECORD_PREFIX_BYTES, headBytes), batch.data), 4);
  return buf;
}

/** What reading a record at some position found. */
export type ReadOutcome =
  | { kind: 'record'; record: JournalRecord; bytes: number }
  /** Not enough bytes here for the record that starts here: read more, or (at the end of a file) a torn record. */
  | { kind: 'short'; needs: number }
  /** A record of this segment whose CRC does not match, but whose length is believable: skip `bytes` and go on. */
  | { kind: 'corrupt'; bytes: number }
  /** No record of this segment starts here: a record of the file's earlier use, or what is left of one. */
  | { kind: 'end' }
  /** A record's start whose length no record could have: nothing after it can be trusted. */
  | { kind: 'garbage' };

/**
 * Reads the record at `at` in `buf` (whose end may be short of the record), expecting records of
 * segment `segment`. `fileLeft`: bytes of the file from `at` to its end, which bounds a believable
 * length.
 */
export function readRecord(buf: Buffer, at: number, fileLeft: number, segment: number): ReadOutcome {
  const available = buf.byteLength - at;
  if (available < RECORD_HEADER_BYTES) return fileLeft < RECORD_HEADER_BYTES ? (fileLeft === 0 ? { kind: 'end' } : { kind: 'garbage' }) : { kind: 'short', needs: RECORD_HEADER_BYTES };
  const magic = buf.readUInt32LE(at);
  if (!isRecordMagic(magic) || buf.readUInt32LE(at + 16) !== segment) return { kind: 'end' };
  const length = buf.readUInt32LE(at + 8);
  const count = buf.readUInt32LE(at + 12);
  const total = RECORD_PREFIX_BYTES + length;
  if (length < RECORD_HEADER_BYTES - RECORD_PREFIX_BYTES + 16 * count || total > fileLeft) return { kind: 'garbage' };
  if (available < total) return { kind: 'short', needs: total };
  const body = buf.subarray(at + RECORD_PREFIX_BYTES, at + total);
  const crc = magic === RECORD_MAGIC ? crc32c(body) : crc32(body);
  if (crc !== buf.readUInt32LE(at + 4)) return { kind: 'corrupt', bytes: total };
  const offsetsAt = at + RECORD_HEADER_BYTES;
  const dataAt = offsetsAt + 16 * count;
  // Copies: the reader's buffer is reused, and produceBatch wants the offsets aligned.
  const messages = new Uint32Array(4 * count);
  Buffer.from(messages.buffer).set(buf.subarray(offsetsAt, dataAt));
  const data = Buffer.from(buf.subarray(dataAt, at + total));
  for (let i = 0; i < 4 * count; i++) if (messages[i]! > data.byteLength) return { kind: 'corrupt', bytes: total };
  return { kind: 'record', record: { count, data, messages, timestamp: buf.readDoubleLE(at + 24) }, bytes: total };
}
