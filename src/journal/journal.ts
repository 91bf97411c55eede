// The write-ahead journal of one worker slot: every request accepted in ACK_MODE=async is a record
// here before it is answered 202, and stays until Kafka has acknowledged every point of it. A crash
// of the worker (kill -9, an OOM kill, a native crash) or of the whole service loses nothing: the
// next worker in the slot, or the next start, produces again what is left.
//
//   append ──▶ segment file (written to the OS; with JOURNAL_SYNC=disk also fdatasync'd before the 202)
//     │                                  each record has an id: produceBatch's tag (kafka/producer.ts)
//     ▼
//   acknowledged(id, n) ── all its points acknowledged ──▶ marked done (.done beside the segment)
//     a segment whose records are all done, and that takes no more, is deleted with its marks
//
//   open ──▶ the segments a worker of this slot left (slot 0 also takes those of slots that no longer
//            exist) are recovered: their records not marked done are read back (nextRecovered) and
//            produced again, with the timestamps they were accepted with: at least once.
//
// Files: `slot-<slot>.<seq>.wal` (records, record.ts), `slot-<slot>.<seq>.done` (the indexes of the
// records done, in the order they were done, each with a check: marks.ts), and one empty
// `slot-<slot>.<limit>.next` (segment numbers reserved up to it: nextSeqNumber). A segment file whose
// records are all done is not deleted but kept as a spare (`slot-<slot>.<seq>.spare`, two at most)
// and written over as the next segment: writing over pages the OS already holds cost less than half
// of writing new ones (6-7 against 15-17 µs of CPU per 12.8 KB record, measured on this machine's
// ext4), and on the live service it was most of the journal's cost. Records of the file's earlier
// use, left past the new ones, carry their old segment number, which ends the reading; only this
// process's spares are written over (the constructor says why). One slot's files are written by one
// process at a time (a replacement takes a dead worker's slot), so nothing needs a lock. The marks spare a restart the
// records Kafka had already acknowledged; a record acknowledged after its mark was last written (at
// most one poll interval, 10 ms) is produced again: a duplicate, counted as possible.
//
// Writes are synchronous: a record is in the OS before the request is answered, whatever the event
// loop does next, and the order of records is the order of requests. In JOURNAL_SYNC=process mode, on
// a file system that keeps allocated blocks allocated (native.ts), a segment file is allocated whole
// and mapped into memory when it is opened, and a record is copied into the mapping: the page cache
// is the file, so the record outlives the process just as a written one does, for a copy instead of
// a system call. A spare keeps its mapping for its next use. Where the disk cannot give a whole
// segment (nearly full), or elsewhere, records are written with pwritev, and a full disk is a refused
// write. With JOURNAL_SYNC=disk the 202 also waits for an fdatasync of the segment, one for every
// request that came in the meantime (group-commit.ts).
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { diskFiles, type JournalFiles } from './files.js';
import { GroupCommit, type CommitDone } from './group-commit.js';
import { decodeLegacyMarks, decodeMarks, encodeMarks, LEGACY_MARKS_SUFFIX, MARKS_SUFFIX } from './marks.js';
import { JournalError } from './journal-error.js';
import { encodeHead, isRecordMagic, readRecord, RECORD_HEADER_BYTES, RECORD_PREFIX_BYTES, recordBytes, type JournalBatch, type JournalRecord } from './record.js';

/** A segment takes no more records past this size (a larger record still gets a segment of its own). */
export const SEGMENT_MAX_BYTES = 16 * 1024 * 1024;
/** The active segment is rolled over once everything in it is done and it holds this much. */
const ROLL_WHEN_DONE_BYTES = 1024 * 1024;
/** After a failed write, how often the free space of the journal's file system is looked at. */
const PROBE_INTERVAL_MS = 1_000;
/** Record ids wrap here: produceBatch's tags are 0 to 2^31 - 1. */
const ID_LIMIT = 2 ** 31;
/** Any file of a slot's: segments, spares, marks, and the reservation of its numbers. */
const SLOT_FILE_RE = /^slot-(\d+)\.(\d{12})\.(wal|spare|done|acks|next)$/;
/** Segment numbers reserved at a time (a directory fsync each: once per this many segments). */
const SEQ_BLOCK = 1000;
/** Done segment files kept to be written over (see above), per slot. */
const MAX_SPARES = 2;
/** The spill journal of earlier versions: records that failed after their 202, read in place at open. */
const LEGACY_RE = /^worker-(\d+)\.(\d{12})\.spill$/;

export type JournalSync = 'process' | 'disk';

export { JournalError };

export interface JournalOptions {
  dir: string;
  slot: number;
  /** Slots in use (WORKERS): slot 0 recovers the files of slots at or above it. */
  slots: number;
  maxBytes: number;
  sync: JournalSync;
  /** JOURNAL_SYNC=disk: the least time between the starts of two group commits (0: one as soon as the last ends). */
  syncIntervalMs?: number;
  /** JOURNAL_SYNC=disk: called with each group commit's duration in seconds (its fdatasyncs, start to end). */
  onCommit?: (seconds: number) => void;
  /** A record whose CRC does not match, or a file that ends in a torn record: counted and skipped. */
  onCorrupt?: (file: string, at: number, what: string) => void;
  /** Map segments where the file system allows (the default), or always write them with pwritev. */
  mapSegments?: boolean;
  /** Every file operation goes through here: the disk (the default), or a test's crashable file system. */
  files?: JournalFiles;
  /** A segment's size (SEGMENT_MAX_BYTES): the power-cut tests make it small, to roll segments over often. */
  segmentBytes?: number;
}

interface Segment {
  readonly seq: number;
  readonly slot: number;
  readonly path: string;
  /** Open for appending (the active segment), or null. */
  fd: number | null;
  /** The file mapped, allocated up to `capacity` (see above), or null: written with pwritev. */
  map: Uint8Array | null;
  /** Bytes of records it takes (a larger record gets a segment of its own). */
  readonly capacity: number;
  bytes: number;
  /** Records in it (recovered: read so far), and of those, done. */
  records: number;
  done: number;
  /** Takes no more records: rolled over, or recovered and read to its end. */
  sealed: boolean;
  /** Left by an earlier process: read, never written. Once done it is deleted, never kept as a spare (see the constructor). */
  readonly recovered: boolean;
  /** An earlier version's spill file, read in place: no marks, deleted once done. */
  readonly spill: boolean;
  /** Indexes marked done: written to .done at the next flushMarks(). */
  marks: number[];
  /** The .done file, open for appending once a mark was written (opening it every poll cost 4.9 µs a request). */
  marksFd: number | null;
  /** Recovered: indexes already marked done by an earlier process. */
  readonly doneBefore: ReadonlySet<number>;
}

/** A record Kafka has not yet acknowledged all points of. */
export interface InFlightRecord {
  readonly id: number;
  readonly segment: Segment;
  readonly index: number;
  readonly points: number;
  /** Points not yet acknowledged. */
  remaining: number;
  /** When it was accepted, ms since the epoch (its Kafka timestamp). */
  readonly timestamp: number;
  /** When this process produced it (performance.now()): the delivery latency counts from there. */
  readonly producedAt: number;
}

export class Journal {
  readonly dir: string;
  private readonly slot: number;
  private readonly maxBytes: number;
  private readonly onCorrupt: JournalOptions['onCorrupt'];
  /** Every segment not yet deleted, oldest first; the last is the active one (when not recovered). */
  private readonly segments: Segment[] = [];
  private active: Segment | null = null;
  /** Done segment files kept to be written over by the next segments, with their mappings. */
  private readonly spares: { path: string; map: Uint8Array | null }[] = [];
  /** The file system when segments are mapped (JOURNAL_SYNC=process, and see native.ts), else null. */
  readonly mappedOn: string | null;
  /** A segment's size: SEGMENT_MAX_BYTES unless the options say otherwise. */
  private readonly segmentMaxBytes: number;
  /** A new mapped segment's capacity: that, or JOURNAL_MAX_BYTES when smaller (it is allocated whole). */
  private readonly segmentBytes: number;
  private nextSeq = 0;
  /** Numbers below this one are reserved on the disk: `slot-<slot>.<reservedUpTo>.next` (see nextSeqNumber). */
  private reservedUpTo = 0;
  private reservation: string | null = null;
  private nextId = 0;
  private heldBytes = 0;
  private readonly inFlight = new Map<number, InFlightRecord>();
  /** Recovered segments still to read, and the records read and not yet handed out. */
  private readonly toRecover: Segment[] = [];
  private recoveredQueue: { segment: Segment; index: number; record: JournalRecord }[] = [];
  /** Records left by an earlier process not yet handed out (an estimate until each file is read). */
  private recoveredLeft = 0;
  /** The last append failed (disk full, I/O error): cleared by the next that succeeds (see writable()). */
  writeFailure: JournalError | null = null;
  private failedBytes = 0;
  private lastProbeAt = 0;
  /** Counts, for the metrics. */
  corruptRecords = 0;
  /** The head (header and offsets) of the record being written: scratch, grown as records need. */
  private head: Buffer = Buffer.alloc(4096);
  /** JOURNAL_SYNC=disk: the fdatasyncs the 202s wait for (group-commit.ts); null in process mode. */
  private readonly commits: GroupCommit | null;
  private readonly files: JournalFiles;

  /** Creates the directory if needed and finds what earlier processes left. Throws JournalError. */
  constructor(opts: JournalOptions) {
    this.dir = opts.dir;
    this.slot = opts.slot;
    this.maxBytes = opts.maxBytes;
    const files = (this.files = opts.files ?? diskFiles);
    this.commits = opts.sync === 'disk' ? new GroupCommit(opts.dir, opts.syncIntervalMs ?? 0, opts.onCommit, files) : null;
    this.onCorrupt = opts.onCorrupt;
    let names: string[];
    try {
      files.makeDir(this.dir);
      names = files.list(this.dir);
    } catch (err) {
      throw new JournalError(`cannot use the journal directory ${this.dir} (JOURNAL_DIR): ${(err as Error).message}`, { cause: err });
    }
    // In disk mode a mapped page written after its fdatasync faults again (12 against 5 µs a record, measured): pwritev there.
    this.mappedOn = opts.sync === 'process' && opts.mapSegments !== false ? files.mappable(this.dir) : null;
    this.segmentMaxBytes = opts.segmentBytes ?? SEGMENT_MAX_BYTES;
    this.segmentBytes = Math.min(this.segmentMaxBytes, opts.maxBytes);
    const ours = (slot: number) => slot === this.slot || (this.slot === 0 && slot >= opts.slots);
    // Sequence numbers go on from the highest any file of this slot has, marks included: after a power
    // cut a segment's name may be gone while its marks are not, and a new segment of that number would
    // take them for its own (the power-cut test lost a record that way, seed 87). And from the slot's
    // reservation (nextSeqNumber), which outlives every other file.
    const found: { slot: number; seq: number; name: string }[] = [];
    const walSeqs = new Set<string>();
    const legacy: string[] = [];
    for (const name of names) {
      const m = SLOT_FILE_RE.exec(name);
      if (m === null) {
        const l = LEGACY_RE.exec(name);
        if (l !== null && ours(Number(l[1]))) legacy.push(name);
        continue;
      }
      const slot = Number(m[1]);
      const seq = Number(m[2]);
      if (slot === this.slot) this.nextSeq = Math.max(this.nextSeq, m[3] === 'next' ? seq : seq + 1);
      if (m[3] === 'next') {
        if (slot !== this.slot) continue;
        // One reservation: the highest (after a power cut, an older name may be back beside it).
        if (this.reservation !== null && seq <= this.reservedUpTo) {
          unlinkIfThere(files, join(this.dir, name));
          continue;
        }
        if (this.reservation !== null) unlinkIfThere(files, this.reservation);
        this.reservation = join(this.dir, name);
        this.reservedUpTo = seq;
        continue;
      }
      if (!ours(slot)) continue;
      if (m[3] === 'wal') {
        found.push({ slot, seq, name });
        walSeqs.add(`${slot}.${m[2]}`);
      } else if (m[3] === 'spare') {
        // Not written over: after a power cut a spare may hold records of a higher number than its
        // name (a rename to its next use that did not reach the disk), and a new segment of that
        // number written over it would read them back as its own. Spares are this process's only.
        unlinkIfThere(files, join(this.dir, name));
      }
    }
    for (const name of names) {
      // Marks without their segment (it was deleted, or its name did not survive a power cut).
      const m = SLOT_FILE_RE.exec(name);
      if (m !== null && (m[3] === 'done' || m[3] === 'acks') && ours(Number(m[1])) && !walSeqs.has(`${m[1]}.${m[2]}`)) unlinkIfThere(files, join(this.dir, name));
    }
    // An earlier version's spill files first (their points are the oldest), read where they are:
    // written into a segment instead, a crash between that and their deletion gave their points back twice.
    for (const name of legacy.sort()) {
      const path = join(this.dir, name);
      let buf: Buffer;
      try {
        buf = files.readFile(path);
      } catch {
        continue;
      }
      const segment: Segment = {
        seq: -1, slot: this.slot, path, fd: null, map: null, capacity: buf.byteLength, bytes: buf.byteLength, records: 0, done: 0, sealed: true, recovered: true, spill: true, marks: [], marksFd: null, doneBefore: new Set(),
      };
      for (const record of readLegacySpill(buf, (at, what) => this.corrupt(path, at, what))) {
        this.recoveredQueue.push({ segment, index: segment.records++, record });
        this.recoveredLeft++;
      }
      this.segments.push(segment);
      this.heldBytes += segment.bytes;
      if (segment.records === 0) this.deleteIfDone(segment);
    }
    found.sort((a, b) => a.slot - b.slot || a.seq - b.seq);
    for (const f of found) {
      const path = join(this.dir, f.name);
      // Counted now (headers only), read when their turn comes: the metrics say what waits from the start.
      // A mapped segment's file is longer than its records: the records' bytes are what the limit counts.
      const { records, bytes } = countRecords(files, path, f.seq);
      const segment: Segment = {
        seq: f.seq, slot: f.slot, path, fd: null, map: null, capacity: bytes, bytes, records: 0, done: 0, sealed: false, recovered: true, spill: false, marks: [], marksFd: null,
        doneBefore: readMarks(files, path, f.seq),
      };
      this.segments.push(segment);
      this.toRecover.push(segment);
      this.heldBytes += bytes;
      this.recoveredLeft += Math.max(0, records - segment.doneBefore.size);
    }
  }

  // ---- appending ------------------------------------------------------------------------------

  /** Whether a record of `bytes` fits under JOURNAL_MAX_BYTES now. */
  fits(bytes: number): boolean {
    if (this.heldBytes + bytes <= this.maxBytes) return true;
    // The active segment's records may all be done: it goes, and its bytes with it.
    const active = this.active;
    if (active !== null && active.records > 0 && active.done === active.records) this.seal(active);
    return this.heldBytes + bytes <= this.maxBytes;
  }

  /**
   * Whether records can be written: no write has failed since the last that succeeded, or the disk
   * has room again for twice the record that failed (statfs, looked at once a second at most). A
   * failure other than a full disk (an I/O error, a read-only file system) shows at the next try.
   */
  writable(): boolean {
    if (this.writeFailure === null) return true;
    const now = Date.now();
    if (now - this.lastProbeAt < PROBE_INTERVAL_MS) return false;
    this.lastProbeAt = now;
    try {
      if (this.files.freeBytes(this.dir) >= 2 * this.failedBytes) this.writeFailure = null;
    } catch {
      /* still failing */
    }
    return this.writeFailure === null;
  }

  /**
   * Writes the record of one accepted request; returns its id (produceBatch's tag), in flight until
   * Kafka has acknowledged all its points. Throws JournalError when the disk refuses it, having kept
   * nothing of it (the file is cut back to before it).
   */
  append(batch: JournalBatch, timestamp: number): InFlightRecord {
    const { segment, index } = this.write(batch, timestamp);
    return this.track(segment, index, batch.count, timestamp);
  }

  /** Writes a record into the active segment; returns where it is. */
  private write(batch: JournalBatch, timestamp: number): { segment: Segment; index: number } {
    const bytes = recordBytes(batch);
    const segment = this.activeFor(bytes);
    this.head = encodeHead(this.head, batch, timestamp, segment.seq);
    const head = this.head.subarray(0, bytes - batch.data.byteLength);
    if (segment.map !== null) {
      // Into the page cache with two copies (activeFor made room: the segment is allocated whole).
      segment.map.set(head, segment.bytes);
      segment.map.set(batch.data, segment.bytes + head.byteLength);
    } else {
      this.writeAt(segment, [head, batch.data], bytes);
    }
    this.writeFailure = null;
    segment.bytes += bytes;
    this.heldBytes += bytes;
    this.commits?.written(segment.fd!);
    return { segment, index: segment.records++ };
  }

  /** Writes a record with pwritev at the segment's end; on failure keeps nothing of it and throws. */
  private writeAt(segment: Segment, parts: Uint8Array[], bytes: number): void {
    try {
      // At its place in the file: a spare file is written over from its start.
      let written = this.files.writeAt(segment.fd!, parts, segment.bytes);
      // writev may write part of it (a disk nearly full): the rest, or the error that says why.
      while (written < bytes) written += writeRest(this.files, segment.fd!, parts, written, segment.bytes);
    } catch (err) {
      this.failedBytes = bytes;
      this.writeFailed(segment, err);
    }
  }

  /** The segment to append `bytes` to: the active one, or a new one when it would grow past its size. */
  private activeFor(bytes: number): Segment {
    const active = this.active;
    if (active !== null && (active.bytes + bytes <= active.capacity || (active.bytes === 0 && active.map === null))) return active;
    if (active !== null) this.seal(active);
    const seq = this.nextSeqNumber();
    const path = join(this.dir, `slot-${this.slot}.${String(seq).padStart(12, '0')}.wal`);
    const capacity = Math.max(this.segmentBytes, bytes);
    const spare = this.spares.shift();
    let fd: number;
    let map: Uint8Array | null = null;
    try {
      if (spare === undefined) fd = this.files.create(path);
      else {
        this.files.rename(spare.path, path);
        fd = this.files.openWrite(path);
        if (spare.map !== null && spare.map.byteLength >= capacity) map = spare.map;
        else if (spare.map !== null) this.files.unmap(spare.map);
      }
    } catch (err) {
      this.writeFailure = new JournalError(`cannot create the journal file ${path}: ${(err as Error).message}`, { cause: err });
      throw this.writeFailure;
    }
    if (map === null && this.mappedOn !== null) {
      map = this.files.map(fd, capacity);
      // The disk could not give the whole segment: what a failed allocation took goes back (a new
      // file's blocks), and its records are written one by one until the disk refuses one.
      if (map === null && spare === undefined) ftruncateQuietly(this.files, fd);
    }
    const segment: Segment = { seq, slot: this.slot, path, fd, map, capacity: map === null ? Math.max(this.segmentMaxBytes, bytes) : capacity, bytes: 0, records: 0, done: 0, sealed: false, recovered: false, spill: false, marks: [], marksFd: null, doneBefore: new Set() };
    this.segments.push(segment);
    this.active = segment;
    this.commits?.dirChanged();
    return segment;
  }

  /**
   * The next segment number. Numbers are reserved on the disk SEQ_BLOCK at a time, by the name of an
   * empty file, `slot-<slot>.<limit>.next` (created, then renamed to each next limit, and the directory
   * synced before a number of the new block is used), so that they never go back: not when every
   * segment was deleted (the numbers began again at 0), and not after a power cut that brings back
   * files whose deletion had not reached the disk. A number used twice had its old segment's records,
   * all acknowledged long ago, read back after newer ones (the power-cut test, seed 757).
   */
  private nextSeqNumber(): number {
    if (this.nextSeq >= this.reservedUpTo) {
      const limit = this.nextSeq + SEQ_BLOCK;
      const path = join(this.dir, `slot-${this.slot}.${String(limit).padStart(12, '0')}.next`);
      try {
        if (this.reservation === null) this.files.close(this.files.create(path));
        else this.files.rename(this.reservation, path);
        this.files.syncDirSync(this.dir);
      } catch (err) {
        this.writeFailure = new JournalError(`cannot reserve journal segment numbers (${path}): ${(err as Error).message}`, { cause: err });
        throw this.writeFailure;
      }
      this.reservation = path;
      this.reservedUpTo = limit;
    }
    return this.nextSeq++;
  }

  /** A write that failed: the file is cut back to its records, and the error kept for readiness. */
  private writeFailed(segment: Segment, err: unknown): never {
    this.writeFailure = new JournalError(`cannot write the journal file ${segment.path}: ${(err as Error).message}`, { cause: err });
    try {
      this.files.truncate(segment.fd!, segment.bytes);
    } catch {
      // Cannot cut it back either: take no more records into it (reading stops at the torn record).
      this.seal(segment);
    }
    throw this.writeFailure;
  }

  private seal(segment: Segment): void {
    segment.sealed = true;
    if (this.active === segment) this.active = null;
    if (segment.fd !== null) {
      if (this.commits !== null) this.commits.closeFile(segment.fd);
      else this.files.close(segment.fd);
      segment.fd = null;
    }
    // A sealed segment keeps its mapping, to be a spare that needs no new one, unless several do
    // already: during an outage, a journal of many full segments would otherwise stay mapped whole.
    if (segment.map !== null && this.segments.filter((s) => s.sealed && s.map !== null).length > MAX_SPARES) {
      this.files.unmap(segment.map);
      segment.map = null;
    }
    this.deleteIfDone(segment);
  }

  private track(segment: Segment, index: number, points: number, timestamp: number): InFlightRecord {
    const id = this.nextId;
    this.nextId = (this.nextId + 1) % ID_LIMIT;
    const record: InFlightRecord = { id, segment, index, points, remaining: points, timestamp, producedAt: performance.now() };
    this.inFlight.set(id, record);
    return record;
  }

  // ---- acknowledgements -----------------------------------------------------------------------

  /** The record of this id, while in flight. */
  get(id: number): InFlightRecord | undefined {
    return this.inFlight.get(id);
  }

  /**
   * Kafka acknowledged `count` points of record `id` (takeAcks). Returns the record once all its
   * points are (it is then done: marked, and its segment deleted once all of it is), else null.
   */
  acknowledged(id: number, count: number): InFlightRecord | null {
    const record = this.inFlight.get(id);
    if (record === undefined) return null;
    record.remaining -= count;
    if (record.remaining > 0) return null;
    this.inFlight.delete(id);
    const segment = record.segment;
    segment.done++;
    segment.marks.push(record.index);
    // An active segment whose records are all done need not wait to fill up before it goes.
    if (segment === this.active && segment.done === segment.records && (segment.bytes >= ROLL_WHEN_DONE_BYTES || this.writeFailure !== null)) this.seal(segment);
    else this.deleteIfDone(segment);
    return record;
  }

  /** Writes the marks of the records done since the last call (once per poll, not per record). */
  flushMarks(): void {
    for (const segment of this.segments) {
      if (segment.marks.length === 0) continue;
      if (segment.spill) {
        segment.marks = []; // a spill file has no marks: produced again after a crash, a duplicate
        continue;
      }
      const marks = encodeMarks(segment.seq, segment.marks);
      segment.marks = [];
      try {
        segment.marksFd ??= this.files.openAppend(marksPath(segment.path));
        this.files.append(segment.marksFd, marks);
      } catch {
        // A mark not written costs a duplicate after a restart, never a point: not worth a refusal.
      }
    }
  }

  private deleteIfDone(segment: Segment): void {
    if (!segment.sealed || segment.done < segment.records) return;
    if (segment.fd !== null) this.files.close(segment.fd);
    segment.fd = null;
    closeMarks(this.files, segment);
    if (!segment.spill) unlinkIfThere(this.files, marksPath(segment.path));
    if (segment.recovered && !segment.spill) unlinkIfThere(this.files, marksPath(segment.path, LEGACY_MARKS_SUFFIX));
    // Kept to be written over, if this process wrote it (the constructor says why not otherwise) and
    // the spares are not all there.
    const map = segment.map;
    segment.map = null;
    if (!segment.recovered && segment.slot === this.slot && this.spares.length < MAX_SPARES && this.writeFailure === null) {
      const spare = segment.path.slice(0, -'.wal'.length) + '.spare';
      try {
        this.files.rename(segment.path, spare);
        this.spares.push({ path: spare, map });
        this.commits?.dirChanged();
      } catch {
        unlinkIfThere(this.files, segment.path);
        if (map !== null) this.files.unmap(map);
      }
    } else {
      unlinkIfThere(this.files, segment.path);
      if (map !== null) this.files.unmap(map);
    }
    segment.marks = [];
    this.heldBytes -= segment.bytes;
    this.segments.splice(this.segments.indexOf(segment), 1);
  }

  // ---- recovery -------------------------------------------------------------------------------

  /** Whether records left by an earlier process are still to be produced again. */
  get recovering(): boolean {
    return this.toRecover.length > 0 || this.recoveredQueue.length > 0;
  }

  /**
   * Up to `max` records left by an earlier process and not marked done, in the order they were
   * written, each in flight under a new id; none once all are handed out.
   */
  nextRecovered(max: number): { record: JournalRecord; inFlight: InFlightRecord }[] {
    const out: { record: JournalRecord; inFlight: InFlightRecord }[] = [];
    while (out.length < max) {
      if (this.recoveredQueue.length === 0) {
        const segment = this.toRecover.shift();
        if (segment === undefined) {
          this.recoveredLeft = 0;
          break;
        }
        this.recoveredQueue = this.readSegment(segment);
        continue;
      }
      const next = this.recoveredQueue.shift()!;
      this.recoveredLeft = Math.max(0, this.recoveredLeft - 1);
      out.push({ record: next.record, inFlight: this.track(next.segment, next.index, next.record.count, next.record.timestamp) });
    }
    return out;
  }

  /** A recovered segment's records not marked done; the segment is read whole (at most 16 MiB usually). */
  private readSegment(segment: Segment): { segment: Segment; index: number; record: JournalRecord }[] {
    let buf: Buffer;
    try {
      buf = this.files.readFile(segment.path);
    } catch (err) {
      this.corrupt(segment.path, 0, `cannot be read: ${(err as Error).message}`);
      buf = Buffer.alloc(0);
    }
    const records: { segment: Segment; index: number; record: JournalRecord }[] = [];
    let at = 0;
    let index = 0;
    while (at < buf.byteLength) {
      const r = readRecord(buf, at, buf.byteLength - at, segment.seq);
      if (r.kind === 'record') {
        if (!segment.doneBefore.has(index)) records.push({ segment, index, record: r.record });
        at += r.bytes;
        index++;
      } else if (r.kind === 'corrupt') {
        this.corrupt(segment.path, at, 'a record whose checksum does not match; skipped');
        at += r.bytes;
        index++;
      } else if (r.kind === 'end') {
        break; // the end of this segment's records (a spare's earlier records may follow)
      } else {
        this.corrupt(segment.path, at, `${buf.byteLength - at} bytes that are not a whole record (a write cut short); the file is read up to them`);
        break;
      }
    }
    // The records not produced again count as done already: the segment goes once the others are.
    segment.records = index;
    segment.done = index - records.length;
    segment.sealed = true;
    if (records.length === 0) this.deleteIfDone(segment);
    return records;
  }

  private corrupt(file: string, at: number, what: string): void {
    this.corruptRecords++;
    this.onCorrupt?.(file, at, what);
  }

  // ---- JOURNAL_SYNC=disk ----------------------------------------------------------------------

  /**
   * Calls `done` once every record appended so far is on the disk (group-commit.ts); in
   * JOURNAL_SYNC=process mode at once.
   */
  afterCommit(done: CommitDone): void {
    if (this.commits === null) done(null);
    else this.commits.afterCommit(done);
  }

  // ---- what it holds --------------------------------------------------------------------------

  /** Bytes of every file not yet deleted (JOURNAL_MAX_BYTES bounds it). */
  get bytes(): number {
    return this.heldBytes;
  }

  get capacity(): number {
    return this.maxBytes;
  }

  /** Records not yet acknowledged whole: in flight, and left by an earlier process to be produced again. */
  get records(): number {
    return this.inFlight.size + this.recoveredLeft;
  }

  /** Points of those records not yet acknowledged. */
  get pendingPoints(): number {
    let points = 0;
    for (const r of this.inFlight.values()) points += r.remaining;
    return points;
  }

  /** The acceptance time (ms since the epoch) of the oldest record in flight, or null. */
  get oldestTimestamp(): number | null {
    let oldest: number | null = null;
    // In id order, which is nearly acceptance order: recovered records come after live ones.
    let looked = 0;
    for (const r of this.inFlight.values()) {
      if (oldest === null || r.timestamp < oldest) oldest = r.timestamp;
      if (++looked === 64) break;
    }
    return oldest;
  }

  /** Writes the marks, syncs (disk mode) and closes; what is in flight stays for the next start. */
  close(): void {
    // Disk mode: what waits for a commit is synced and answered before the files close.
    this.commits?.close();
    this.flushMarks();
    for (const segment of this.segments) {
      closeMarks(this.files, segment);
      if (segment.fd === null) continue;
      this.files.close(segment.fd);
      segment.fd = null;
    }
    // What was copied into a mapping is in the page cache: unmapping loses nothing.
    for (const holder of [...this.segments, ...this.spares]) {
      if (holder.map !== null) this.files.unmap(holder.map);
      holder.map = null;
    }
  }
}

/** The records of a segment file and their bytes, by their headers alone (a torn or damaged end stops the count). */
function countRecords(files: JournalFiles, path: string, seq: number): { records: number; bytes: number } {
  let fd: number;
  try {
    fd = files.openRead(path);
  } catch {
    return { records: 0, bytes: 0 };
  }
  try {
    const size = files.size(fd);
    const header = Buffer.alloc(RECORD_HEADER_BYTES);
    let at = 0;
    let count = 0;
    while (at + RECORD_HEADER_BYTES <= size && files.read(fd, header, at) === RECORD_HEADER_BYTES) {
      if (!isRecordMagic(header.readUInt32LE(0)) || header.readUInt32LE(16) !== seq) break;
      const next = at + RECORD_PREFIX_BYTES + header.readUInt32LE(8);
      if (next > size) break;
      at = next;
      count++;
    }
    return { records: count, bytes: at };
  } finally {
    files.close(fd);
  }
}

function closeMarks(files: JournalFiles, segment: Segment): void {
  if (segment.marksFd === null) return;
  try {
    files.close(segment.marksFd);
  } catch {
    /* a mark file that cannot be closed: it goes with the segment */
  }
  segment.marksFd = null;
}

function marksPath(walPath: string, suffix = MARKS_SUFFIX): string {
  return walPath.slice(0, -'.wal'.length) + suffix;
}

/** The records of segment `seq` (file `walPath`) marked done: its .done file, and an earlier version's .acks. */
function readMarks(files: JournalFiles, walPath: string, seq: number): Set<number> {
  const read = (path: string): Buffer | null => {
    try {
      return files.readFile(path);
    } catch {
      return null;
    }
  };
  const done = decodeMarks(read(marksPath(walPath)) ?? Buffer.alloc(0), seq);
  const legacy = read(marksPath(walPath, LEGACY_MARKS_SUFFIX));
  if (legacy !== null) for (const index of decodeLegacyMarks(legacy)) done.add(index);
  return done;
}

function unlinkIfThere(files: JournalFiles, path: string): void {
  try {
    files.unlink(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

/** Writes what is left of a record after `written` bytes of it (a short writev), the record at `position`. */
function writeRest(files: JournalFiles, fd: number, parts: Uint8Array[], written: number, position: number): number {
  let skip = written;
  const rest: Uint8Array[] = [];
  for (const p of parts) {
    if (skip >= p.byteLength) {
      skip -= p.byteLength;
      continue;
    }
    rest.push(skip === 0 ? p : p.subarray(skip));
    skip = 0;
  }
  return files.writeAt(fd, rest, position + written);
}

function ftruncateQuietly(files: JournalFiles, fd: number): void {
  try {
    files.truncate(fd, 0);
  } catch {
    /* the space stays taken until the file is reused or deleted */
  }
}

/**
 * The records of a spill journal file of an earlier version, one point each:
 * u32 crc32 | u32 key length | u32 value length | f64 timestamp | key | value (the CRC covers all after it).
 */
export function* readLegacySpill(buf: Buffer, corrupt: (at: number, what: string) => void): Generator<JournalRecord> {
  let at = 0;
  while (at + 20 <= buf.byteLength) {
    const keyLen = buf.readUInt32LE(at + 4);
    const valueLen = buf.readUInt32LE(at + 8);
    const end = at + 20 + keyLen + valueLen;
    if (end > buf.byteLength) break;
    if (buf.readUInt32LE(at) !== crc32(buf.subarray(at + 4, end))) {
      corrupt(at, 'a spill record whose checksum does not match; the file is read up to it');
      return;
    }
    // value then key, as produceBatch takes them: one message.
    const data = Buffer.concat([buf.subarray(at + 20 + keyLen, end), buf.subarray(at + 20, at + 20 + keyLen)]);
    yield { count: 1, data, messages: Uint32Array.of(0, valueLen, valueLen, valueLen + keyLen), timestamp: buf.readDoubleLE(at + 12) };
    at = end;
  }
  if (at < buf.byteLength) corrupt(at, 'a torn spill record at the end of the file');
}
