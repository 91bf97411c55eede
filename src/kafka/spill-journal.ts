// The spill journal: where a worker keeps accepted points whose delivery failed after their 202
// (a message timeout during a long outage, a fatal producer error), until they can be replayed.
//
// One journal per worker slot (INGEST_WORKER_SLOT, stable across restarts of that slot), so no two
// processes ever write the same file and no locking is needed. A journal is a sequence of files
// `worker-<slot>.<seq>.spill`; the newest is appended to, the older ones wait for replay. Slot 0
// also adopts the files of slots that no longer exist (the service was restarted with fewer
// WORKERS), so nothing is stranded.
//
// Record: u32 crc32 | u32 key length | u32 value length | f64 Kafka timestamp (ms) | key | value,
// little-endian; the CRC covers everything after itself. A crash can leave a torn last record: reading
// stops there (and says so), because nothing after it was written either.
//
// Appends are buffered and written in batches, each followed by fdatasync: failures arrive in bursts
// (every message of an outage times out at once), and one write plus one sync per burst keeps that
// cheap. The writes are synchronous on purpose: they happen only while Kafka is failing, they keep the
// order of records without a queue of promises, and a batch is at most a few megabytes.
import { closeSync, fdatasyncSync, fsyncSync, mkdirSync, openSync, readdirSync, readSync, statSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { SPILL_RECORD_OVERHEAD_BYTES } from '../spill-record.js';

const RECORD_HEADER_BYTES = SPILL_RECORD_OVERHEAD_BYTES;
/** Appends wait at most this long before they are written and synced. */
const SPILL_FLUSH_INTERVAL_MS = 20;
/** ...or until this many bytes are waiting. */
const SPILL_FLUSH_BYTES = 4 * 1024 * 1024;
const READ_CHUNK_BYTES = 4 * 1024 * 1024;
/** A file is sealed at this size: a replay keeps one file's failures in memory until it is done. */
const SPILL_FILE_MAX_BYTES = 64 * 1024 * 1024;
const FILE_RE = /^worker-(\d+)\.(\d{12})\.spill$/;

export interface SpillRecord {
  key: Buffer;
  value: Buffer;
  /** The Kafka message timestamp the point was accepted with (ms since the epoch). */
  timestamp: number;
}

export class JournalError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'JournalError';
  }
}

export interface SpillJournalOptions {
  dir: string;
  slot: number;
  /** Slots in use (WORKERS): slot 0 adopts the files of slots at or above it. */
  slots: number;
  maxBytes: number;
  /** Called when a torn or corrupt record ends a file early. */
  onCorrupt?: (file: string, validBytes: number, fileBytes: number) => void;
  /** Called when a batched write fails: its records are lost. */
  onWriteError?: (err: JournalError, records: number) => void;
}

export class SpillJournal {
  readonly dir: string;
  private readonly slot: number;
  private readonly maxBytes: number;
  private readonly onCorrupt: SpillJournalOptions['onCorrupt'];
  private readonly onWriteError: SpillJournalOptions['onWriteError'];
  /** The last write failed (disk full, I/O error); cleared by the next successful one. */
  writeFailure: JournalError | null = null;
  /** Files waiting for replay, oldest first, with their sizes. */
  private readonly waiting: { path: string; bytes: number }[] = [];
  private nextSeq = 0;
  private activePath: string | null = null;
  private activeFd: number | null = null;
  private activeBytes = 0;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private flushTimer: NodeJS.Timeout | null = null;
  private waitingBytes = 0;

  /** Creates the directory if needed and finds the files left by earlier runs. Throws JournalError. */
  constructor(opts: SpillJournalOptions) {
    this.dir = opts.dir;
    this.slot = opts.slot;
    this.maxBytes = opts.maxBytes;
    this.onCorrupt = opts.onCorrupt;
    this.onWriteError = opts.onWriteError;
    let names: string[];
    try {
      mkdirSync(this.dir, { recursive: true });
      names = readdirSync(this.dir);
    } catch (err) {
      throw new JournalError(`cannot use spill directory ${this.dir} (SPILL_DIR): ${(err as Error).message}`, { cause: err });
    }
    const found: { path: string; slot: number; seq: number; bytes: number }[] = [];
    for (const name of names) {
      const m = FILE_RE.exec(name);
      if (m === null) continue;
      const slot = Number(m[1]);
      const seq = Number(m[2]);
      if (slot === this.slot) this.nextSeq = Math.max(this.nextSeq, seq + 1);
      if (slot === this.slot || (this.slot === 0 && slot >= opts.slots)) {
        const path = join(this.dir, name);
        found.push({ path, slot, seq, bytes: statSync(path).size });
      }
    }
    found.sort((a, b) => a.slot - b.slot || a.seq - b.seq);
    for (const f of found) {
      if (f.bytes === 0) {
        unlinkSync(f.path);
        continue;
      }
      this.waiting.push({ path: f.path, bytes: f.bytes });
      this.waitingBytes += f.bytes;
    }
  }

  /** Bytes held: files waiting for replay, the file being appended to, and appends not yet written. */
  get bytes(): number {
    return this.waitingBytes + this.activeBytes + this.pendingBytes;
  }

  /** The journal's size limit (SPILL_MAX_BYTES). */
  get capacity(): number {
    return this.maxBytes;
  }

  /** Whether anything is held, written or not. */
  get isEmpty(): boolean {
    return this.bytes === 0;
  }

  /**
   * Queues one record for the next batched write. Returns false, keeping nothing, when the record
   * would take the journal past SPILL_MAX_BYTES (plus `releasing`: bytes of a file about to be removed).
   */
  append(key: Buffer, value: Buffer, timestamp: number, releasing = 0): boolean {
    const size = RECORD_HEADER_BYTES + key.byteLength + value.byteLength;
    if (this.bytes + size > this.maxBytes + releasing) return false;
    const record = Buffer.allocUnsafe(size);
    record.writeUInt32LE(key.byteLength, 4);
    record.writeUInt32LE(value.byteLength, 8);
    record.writeDoubleLE(timestamp, 12);
    key.copy(record, RECORD_HEADER_BYTES);
    value.copy(record, RECORD_HEADER_BYTES + key.byteLength);
    record.writeUInt32LE(crc32(record.subarray(4)), 0);
    this.pending.push(record);
    this.pendingBytes += size;
    if (this.pendingBytes >= SPILL_FLUSH_BYTES) this.flushOrReport();
    else this.flushTimer ??= setTimeout(() => this.flushOrReport(), SPILL_FLUSH_INTERVAL_MS);
    return true;
  }

  /** flush() for the batching timer: a failure is reported, not thrown into the event loop. */
  private flushOrReport(): void {
    const records = this.pending.length;
    try {
      this.flush();
    } catch (err) {
      this.pending = [];
      this.pendingBytes = 0;
      this.onWriteError?.(err as JournalError, records);
    }
  }

  /** Writes and syncs what append() queued. Throws JournalError when the disk refuses. */
  flush(): void {
    if (this.flushTimer !== null) clearTimeout(this.flushTimer);
    this.flushTimer = null;
    if (this.pendingBytes === 0) return;
    const [first] = this.pending;
    const batch = this.pending.length === 1 && first !== undefined ? first : Buffer.concat(this.pending, this.pendingBytes);
    const path = this.activePath ?? this.newFilePath();
    try {
      if (this.activeFd === null) {
        this.activeFd = openSync(path, 'a');
        this.activePath = path;
        syncDirectory(this.dir); // so that the new file's name survives a power cut too
      }
      let off = 0;
      while (off < batch.byteLength) off += writeSync(this.activeFd, batch, off);
      fdatasyncSync(this.activeFd);
    } catch (err) {
      this.writeFailure = new JournalError(`cannot write the spill journal ${path}: ${(err as Error).message}`, { cause: err });
      // A partial write leaves a torn record at the end of this file: seal it (reading stops at the
      // tear) and let the next write start a new file, so later records are not hidden behind it.
      if (this.activeFd !== null) {
        try {
          closeSync(this.activeFd);
        } catch {
          /* already failing; the error above says why */
        }
        this.waiting.push({ path, bytes: this.activeBytes });
        this.waitingBytes += this.activeBytes;
        this.activeFd = null;
        this.activePath = null;
        this.activeBytes = 0;
      }
      throw this.writeFailure;
    }
    this.writeFailure = null;
    this.activeBytes += this.pendingBytes;
    this.pending = [];
    this.pendingBytes = 0;
    if (this.activeBytes >= SPILL_FILE_MAX_BYTES) this.sealActive();
  }

  /**
   * Closes the file being appended to (after writing what is queued) so that it can be replayed;
   * later appends start a new file. Returns the files waiting for replay, oldest first.
   */
  seal(): readonly string[] {
    this.flush();
    this.sealActive();
    return this.waiting.map((f) => f.path);
  }

  /** Size of a file waiting for replay (0 once removed). */
  sizeOf(path: string): number {
    return this.waiting.find((f) => f.path === path)?.bytes ?? 0;
  }

  private sealActive(): void {
    if (this.activeFd === null) return;
    closeSync(this.activeFd);
    // An open file always has its path (appendBatch sets both).
    if (this.activePath !== null) {
      this.waiting.push({ path: this.activePath, bytes: this.activeBytes });
      this.waitingBytes += this.activeBytes;
    }
    this.activeFd = null;
    this.activePath = null;
    this.activeBytes = 0;
  }

  /** Reads the records of a sealed file in order, a few megabytes at a time. */
  *read(path: string): Generator<SpillRecord[]> {
    const fd = openSync(path, 'r');
    const size = statSync(path).size;
    let buf = Buffer.allocUnsafe(READ_CHUNK_BYTES);
    let filled = 0;
    let fileOffset = 0; // of buf[0]
    try {
      for (;;) {
        const n = readSync(fd, buf, filled, buf.byteLength - filled, fileOffset + filled);
        filled += n;
        const records: SpillRecord[] = [];
        let off = 0;
        let corrupt = false;
        while (filled - off >= RECORD_HEADER_BYTES) {
          const keyLen = buf.readUInt32LE(off + 4);
          const valueLen = buf.readUInt32LE(off + 8);
          const end = off + RECORD_HEADER_BYTES + keyLen + valueLen;
          if (fileOffset + end > size) {
            corrupt = true; // a torn last record, or a length no record could have
            break;
          }
          if (end > filled) break;
          if (buf.readUInt32LE(off) !== crc32(buf.subarray(off + 4, end))) {
            corrupt = true;
            break;
          }
          const body = Buffer.from(buf.subarray(off + RECORD_HEADER_BYTES, end)); // a copy: buf is reused
          records.push({ key: body.subarray(0, keyLen), value: body.subarray(keyLen), timestamp: buf.readDoubleLE(off + 12) });
          off = end;
        }
        if (records.length > 0) yield records;
        const consumed = fileOffset + off;
        if (corrupt || (n === 0 && consumed < size)) {
          this.onCorrupt?.(path, consumed, size);
          return;
        }
        if (consumed >= size) return;
        // Keep the partial record; grow the buffer if one record is larger than it.
        const rest = filled - off;
        if (off === 0 && rest === buf.byteLength) {
          const bigger = Buffer.allocUnsafe(buf.byteLength * 2);
          buf.copy(bigger, 0, 0, rest);
          buf = bigger;
        } else {
          buf.copy(buf, 0, off, filled);
        }
        fileOffset += off;
        filled = rest;
      }
    } finally {
      closeSync(fd);
    }
  }

  /** Deletes a replayed file. */
  remove(path: string): void {
    const i = this.waiting.findIndex((f) => f.path === path);
    const file = this.waiting[i];
    if (file === undefined) return;
    unlinkSync(path);
    this.waitingBytes -= file.bytes;
    this.waiting.splice(i, 1);
  }

  /** Writes what is queued and closes the file; an empty journal leaves no file behind. */
  close(): void {
    this.flush();
    if (this.activeFd !== null) closeSync(this.activeFd);
    this.activeFd = null;
  }

  private newFilePath(): string {
    return join(this.dir, `worker-${this.slot}.${String(this.nextSeq++).padStart(12, '0')}.spill`);
  }
}

function syncDirectory(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
