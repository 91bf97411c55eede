// The write-ahead journal of one worker slot: a request's record is here before its 202, and stays
// until Kafka has every point of it, so a crash of the worker or the service loses nothing: the next
// process of the slot produces again what is left.
//
//   append ──▶ the active segment file, in the OS before the answer (JOURNAL_SYNC=disk: fdatasync'd
//     │        first, afterCommit, group-commit.ts); each record's id is produceBatch's tag
//   acknowledged(id, n) ── every point acknowledged ──▶ marked done (marks.ts); a segment all done is
//     deleted, or kept as a spare to be written over
//   open ──▶ the segments of the slots claimed are found; their records not marked done are handed
//     out again (nextRecovered, recovery.ts) with their acceptance time: at least once
//
// One process writes a slot's files: the caller holds the slot's lock (slot-lock.ts). Writes are
// synchronous, so the order of records is the order of requests: copied into a mapped segment where
// the file system allows, written with pwritev elsewhere (segment-file.ts says when). A write refused
// for room keeps nothing of the record and the journal takes records again once there is room
// (writable()); any other failed write or sync fails the journal for good (onFailure), and the worker
// restarts to recover from what the disk holds (group-commit.ts says why a sync is never retried).
import { diskFiles, type JournalFiles } from './files.js';
import { GroupCommit, type CommitDone } from './group-commit.js';
import { isNoRoom, JournalError } from './journal-error.js';
import { encodeHead, recordBytes, viewRecordAt, type JournalBatch, type JournalRecord } from './record.js';
import {
  appendMarks,
  closeSegment,
  countRecords,
  newSegment,
  readMarks,
  readRecordBack,
  retireSegment,
  startSegmentFile,
  writeRecordAt,
  type Segment,
} from './segment-file.js';
import { Recovery } from './recovery.js';
import { findSlotFiles, makeDurableDir, segmentPath, SeqReservation, Spares, type FoundFiles } from './slot-files.js';
import type { SlotClaim } from './slot-lock.js';

/** A segment takes no more records past this size (a larger record still gets a segment of its own). */
export const SEGMENT_MAX_BYTES = 16 * 1024 * 1024;
/** The active segment is rolled over once everything in it is done and it holds this much. */
const ROLL_WHEN_DONE_BYTES = 1024 * 1024;
/** After a write refused for room, how often the free space of the journal's file system is looked at. */
const PROBE_INTERVAL_MS = 1_000;
/** Record ids wrap here: produceBatch's tags are 0 to 2^31 - 1. */
const ID_LIMIT = 2 ** 31;
/** Done segment files kept to be written over (slot-files.ts, Spares), per slot. */
const MAX_SPARES = 2;

export type JournalSync = 'process' | 'disk';

export { JournalError };

export interface JournalOptions {
  dir: string;
  /** The slots this journal holds (slot-lock.ts): it writes `claim.slot` and recovers every slot of `claim.slots`. */
  claim: Pick<SlotClaim, 'slot' | 'slots'>;
  maxBytes: number;
  sync: JournalSync;
  /** JOURNAL_SYNC=disk: the least time between the starts of two group commits (0: one as soon as the last ends). */
  syncIntervalMs?: number;
  /** JOURNAL_SYNC=disk: called with each group commit's duration in seconds (its fdatasyncs, start to end). */
  onCommit?: (seconds: number) => void;
  /** Records found damaged when read back (`records` of them, the first at byte `at` of `file`): counted and skipped. */
  onDamage?: (file: string, at: number, records: number, what: string) => void;
  /** Called once when the journal fails (a write, fdatasync or directory fsync the disk failed): it takes nothing more. */
  onFailure?: (err: JournalError) => void;
  /** Map segments where the file system allows (the default), or always write them with pwritev. */
  mapSegments?: boolean;
  /** Every file operation goes through here: the disk (the default), or a test's crashable file system. */
  files?: JournalFiles;
  /** A segment's size (SEGMENT_MAX_BYTES): the power-cut tests make it small, to roll segments over often. */
  segmentBytes?: number;
}

/** A record Kafka has not yet acknowledged all points of. */
export interface InFlightRecord {
  readonly id: number;
  readonly segment: Segment;
  readonly index: number;
  /** Where it starts in its segment's file, bytes; -1 for a record an earlier process left (read back already). */
  readonly at: number;
  readonly points: number;
  /** Points not yet acknowledged. */
  remaining: number;
  /** When it was accepted, ms since the epoch (its Kafka timestamp). */
  readonly timestamp: number;
  /** When this process produced it (performance.now()): the delivery latency counts from there. */
  readonly producedAt: number;
}

/** A record read back from what an earlier process left, in flight again under a new id. */
export interface RecoveredRecord {
  readonly record: JournalRecord;
  readonly inFlight: InFlightRecord;
}

export class Journal {
  readonly dir: string;
  private readonly slot: number;
  private readonly maxBytes: number;
  private readonly files: JournalFiles;
  private readonly onDamage: JournalOptions['onDamage'];
  private readonly onFailure: JournalOptions['onFailure'];
  /** Every segment not yet deleted, oldest first; the last is the active one (when not recovered). */
  private readonly segments: Segment[] = [];
  private active: Segment | null = null;
  private readonly spares: Spares;
  private readonly numbers: SeqReservation;
  /** The file system when segments are mapped (JOURNAL_SYNC=process, and see native.ts), else null. */
  readonly mappedOn: string | null;
  /** A segment's size: SEGMENT_MAX_BYTES unless the options say otherwise. */
  private readonly segmentMaxBytes: number;
  /** A new mapped segment's capacity: that, or JOURNAL_MAX_BYTES when smaller (it is allocated whole). */
  private readonly segmentBytes: number;
  private nextId = 0;
  private heldBytes = 0;
  private readonly inFlight = new Map<number, InFlightRecord>();
  /** What earlier processes left, to hand out again. */
  private readonly recovery: Recovery;
  private refusedForRoom: JournalError | null = null;
  private refusedBytes = 0;
  private lastProbeAt = 0;
  private failedWith: JournalError | null = null;
  private damagedCount = 0;
  private pointsDone = 0;
  /** The head (header and offsets) of the record being written: scratch, grown as records need. */
  private head: Buffer = Buffer.alloc(4096);
  /** JOURNAL_SYNC=disk: the fdatasyncs the 202s wait for (group-commit.ts); null in process mode. */
  private readonly commits: GroupCommit | null;

  /** Creates the directory if needed and finds what earlier processes left. Throws JournalError. */
  constructor(opts: JournalOptions) {
    this.dir = opts.dir;
    this.slot = opts.claim.slot;
    this.maxBytes = opts.maxBytes;
    const files = (this.files = opts.files ?? diskFiles);
    this.onDamage = opts.onDamage;
    this.onFailure = opts.onFailure;
    this.recovery = new Recovery({
      files,
      damaged: (file, at, records, what) => {
        this.damagedCount += records;
        this.onDamage?.(file, at, records, what);
      },
      read: (segment, records) => {
        if (segment.spill) this.heldBytes += segment.bytes;
        if (records === 0) this.deleteIfDone(segment);
      },
      failed: (err) => this.fail(err),
    });
    this.commits = opts.sync === 'disk' ? new GroupCommit(opts.dir, opts.syncIntervalMs ?? 0, opts.onCommit, files, (err) => this.fail(err)) : null;
    let found: FoundFiles;
    try {
      makeDurableDir(files, this.dir);
      found = findSlotFiles(files, this.dir, this.slot, opts.claim.slots, files.list(this.dir));
    } catch (err) {
      throw new JournalError(`cannot use the journal directory ${this.dir} (JOURNAL_DIR): ${(err as Error).message}`, { cause: err });
    }
    this.numbers = new SeqReservation(files, this.dir, this.slot, found);
    this.spares = new Spares(files, MAX_SPARES, () => this.commits?.dirChanged());
    // In disk mode a mapped page written after its fdatasync faults again, dearer than a write: pwritev there.
    this.mappedOn = opts.sync === 'process' && opts.mapSegments !== false ? files.mappable(this.dir) : null;
    this.segmentMaxBytes = opts.segmentBytes ?? SEGMENT_MAX_BYTES;
    this.segmentBytes = Math.min(this.segmentMaxBytes, opts.maxBytes);
    // An earlier version's spill files first (their points are the oldest), read where they are, when
    // their turn comes: written into a segment instead, a crash between that and their deletion gave
    // their points back twice.
    for (const path of found.spills) {
      const segment = newSegment(-1, this.slot, path, { capacity: 0, bytes: 0, recovered: true, spill: true });
      this.segments.push(segment);
      this.recovery.addSpill(segment);
    }
    for (const f of found.segments) {
      // Counted now (headers only), read when their turn comes: the metrics say what waits from the start.
      // A mapped segment's file is longer than its records: the records' bytes are what the limit counts.
      const { records, bytes, points } = countRecords(files, f.path, f.seq);
      const segment = newSegment(f.seq, f.slot, f.path, { capacity: bytes, bytes, recovered: true, doneBefore: readMarks(files, f.path, f.seq) });
      segment.records = records;
      this.segments.push(segment);
      this.heldBytes += bytes;
      const left = points.reduce((sum, n, index) => (segment.doneBefore.has(index) ? sum : sum + n), 0);
      this.recovery.addSegment(segment, Math.max(0, records - segment.doneBefore.size), left);
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
   * Whether records can be written: the journal has not failed, and no write was refused for room
   * since the last that succeeded, or the disk has room again for twice the record refused (statfs,
   * looked at once a second at most).
   */
  writable(): boolean {
    if (this.failedWith !== null) return false;
    if (this.refusedForRoom === null) return true;
    const now = Date.now();
    if (now - this.lastProbeAt < PROBE_INTERVAL_MS) return false;
    this.lastProbeAt = now;
    try {
      if (this.files.freeBytes(this.dir) >= 2 * this.refusedBytes) this.refusedForRoom = null;
    } catch {
      /* still refused */
    }
    return this.refusedForRoom === null;
  }

  /**
   * Writes the record of one accepted request; returns its id (produceBatch's tag), in flight until
   * Kafka has acknowledged all its points. Throws JournalError when the record cannot be written,
   * having kept nothing of it: `full` when the disk refused it for room, else the journal has failed.
   */
  append(batch: JournalBatch, timestamp: number): InFlightRecord {
    if (this.failedWith !== null) throw this.failedWith;
    const { segment, index, at } = this.write(batch, timestamp);
    return this.track(segment, index, at, batch.count, timestamp);
  }

  /** Writes a record into the active segment; returns where it is. */
  private write(batch: JournalBatch, timestamp: number): { segment: Segment; index: number; at: number } {
    const bytes = recordBytes(batch);
    const segment = this.activeFor(bytes);
    const index = segment.records;
    const at = segment.bytes;
    this.head = encodeHead(this.head, batch, timestamp, segment.seq, index);
    const head = this.head.subarray(0, bytes - batch.data.byteLength);
    if (segment.map !== null) {
      // Into the page cache with two copies (activeFor made room: the segment is allocated whole).
      segment.map.set(head, segment.bytes);
      segment.map.set(batch.data, segment.bytes + head.byteLength);
    } else {
      this.writeAt(segment, [head, batch.data], bytes);
    }
    this.refusedForRoom = null;
    segment.bytes += bytes;
    this.heldBytes += bytes;
    this.commits?.written(segment.fd!);
    segment.records++;
    return { segment, index, at };
  }

  /** Writes a record with pwritev at the segment's end; on failure keeps nothing of it and throws. */
  private writeAt(segment: Segment, parts: Uint8Array[], bytes: number): void {
    try {
      // At its place in the file: a spare file is written over from its start.
      writeRecordAt(this.files, segment.fd!, parts, bytes, segment.bytes);
    } catch (err) {
      this.writeFailed(segment, bytes, err);
    }
  }

  /** A write that failed: the file is cut back to its records, and why is kept (for readiness) or fails the journal. */
  private writeFailed(segment: Segment, bytes: number, err: unknown): never {
    const error = new JournalError(`cannot write the journal file ${segment.path}: ${(err as Error).message}`, { cause: err, full: isNoRoom(err) });
    try {
      this.files.truncate(segment.fd!, segment.bytes);
    } catch {
      // Cannot cut it back either: take no more records into it (reading stops at the torn record).
      this.seal(segment);
    }
    if (error.full) {
      this.refusedForRoom = error;
      this.refusedBytes = bytes;
    } else this.fail(error);
    throw error;
  }

  /** The journal has failed: it takes nothing more, and says so once. */
  private fail(err: JournalError): void {
    if (this.failedWith !== null) return;
    this.failedWith = err;
    this.onFailure?.(err);
  }

  /** The segment to append `bytes` to: the active one, or a new one when it would grow past its size. */
  private activeFor(bytes: number): Segment {
    const active = this.active;
    if (active !== null && (active.bytes + bytes <= active.capacity || (active.bytes === 0 && active.map === null))) return active;
    if (active !== null) this.seal(active);
    let seq: number;
    try {
      seq = this.numbers.take();
    } catch (err) {
      throw this.refused(err as JournalError);
    }
    const path = segmentPath(this.dir, this.slot, seq);
    const capacity = Math.max(this.segmentBytes, bytes);
    let fd: number;
    let map: Uint8Array | null;
    try {
      ({ fd, map } = startSegmentFile(this.files, path, this.spares.take(), capacity, this.mappedOn !== null));
    } catch (err) {
      throw this.refused(err as JournalError);
    }
    const segment = newSegment(seq, this.slot, path, { capacity: map === null ? Math.max(this.segmentMaxBytes, bytes) : capacity, bytes: 0 });
    segment.fd = fd;
    segment.map = map;
    this.segments.push(segment);
    this.active = segment;
    this.commits?.dirChanged();
    return segment;
  }

  /** A new segment that could not be started: kept as refused for room, or the journal fails. */
  private refused(err: JournalError): JournalError {
    if (err.full) this.refusedForRoom = err;
    else this.fail(err);
    return err;
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

  private track(segment: Segment, index: number, at: number, points: number, timestamp: number): InFlightRecord {
    const id = this.nextId;
    this.nextId = (this.nextId + 1) % ID_LIMIT;
    const record: InFlightRecord = { id, segment, index, at, points, remaining: points, timestamp, producedAt: performance.now() };
    this.inFlight.set(id, record);
    return record;
  }

  /**
   * A record this process appended, as produceBatch takes it, its data a view of the mapped segment
   * (only its offsets copied, to be aligned); null when its segment is not mapped (read it back
   * then). Valid until the journal is next called: hand it over at once. No check is made: this
   * process wrote those bytes, and the record is not done, so its segment is neither retired nor
   * written over.
   */
  view(record: InFlightRecord): JournalBatch | null {
    const map = record.segment.map;
    return map === null || record.at < 0 ? null : viewRecordAt(map, record.at, record.points);
  }

  /**
   * A record this process appended, read back from its segment: DELIVERY=exactly-once produces it
   * again after an aborted transaction, the request's own buffers long reused. Throws JournalError
   * when it cannot be read back whole.
   */
  readBack(record: InFlightRecord): JournalRecord {
    return readRecordBack(this.files, record.segment, record.index, record.at);
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
    this.pointsDone += record.points;
    const segment = record.segment;
    segment.done++;
    segment.marks.push(record.index);
    // An active segment whose records are all done need not wait to fill up before it goes.
    if (segment === this.active && segment.done === segment.records && (segment.bytes >= ROLL_WHEN_DONE_BYTES || this.refusedForRoom !== null))
      this.seal(segment);
    else this.deleteIfDone(segment);
    return record;
  }

  /**
   * Writes the marks of the records done since the last call (once per poll, not per record). A mark
   * that cannot be written costs a duplicate after a restart, never a point: not a failure.
   */
  flushMarks(): void {
    for (const segment of this.segments) {
      if (segment.marks.length === 0) continue;
      if (segment.spill) {
        segment.marks = []; // a spill file has no marks: produced again after a crash, a duplicate
        continue;
      }
      appendMarks(this.files, segment);
    }
  }

  /**
   * A segment sealed and all done goes: kept as a spare to be written over (if this process wrote it,
   * the disk writes, and the spares are not all there), or deleted (segment-file.ts, retireSegment).
   */
  private deleteIfDone(segment: Segment): void {
    if (!segment.sealed || segment.done < segment.records) return;
    const spares = !segment.recovered && segment.slot === this.slot && this.refusedForRoom === null && this.failedWith === null ? this.spares : null;
    retireSegment(this.files, segment, spares);
    this.heldBytes -= segment.bytes;
    this.segments.splice(this.segments.indexOf(segment), 1);
  }

  // ---- recovery -------------------------------------------------------------------------------

  /** Whether records left by an earlier process are still to be produced again. */
  get recovering(): boolean {
    return this.recovery.recovering;
  }

  /**
   * Up to `max` records left by an earlier process and not marked done, in the order they were
   * written, each in flight under a new id; none once all are handed out. Throws JournalError (the
   * journal then has failed) when a segment cannot be read: it stays, for the next process to read.
   */
  nextRecovered(max: number): RecoveredRecord[] {
    const out: RecoveredRecord[] = [];
    while (out.length < max) {
      const next = this.recovery.next();
      if (next === undefined) break;
      out.push({ record: next.record, inFlight: this.track(next.segment, next.index, -1, next.record.count, next.record.timestamp) });
    }
    return out;
  }

  // ---- JOURNAL_SYNC=disk ----------------------------------------------------------------------

  /**
   * Calls `done` once every record appended so far is on the disk (group-commit.ts), or with why
   * not; in JOURNAL_SYNC=process mode at once.
   */
  afterCommit(done: CommitDone): void {
    if (this.commits === null) done(this.failedWith);
    else this.commits.afterCommit(done);
  }

  // ---- what it holds --------------------------------------------------------------------------

  /** The journal failed (a write or sync the disk failed): it takes nothing more. */
  get failure(): JournalError | null {
    return this.failedWith;
  }

  /** The last append was refused for room: cleared once the disk has room again (writable()). */
  get noRoom(): JournalError | null {
    return this.refusedForRoom;
  }

  /** Records found damaged when read back. */
  get damagedRecords(): number {
    return this.damagedCount;
  }

  /** Points of the records done (every point acknowledged, or committed) since the journal opened. */
  get donePoints(): number {
    return this.pointsDone;
  }

  /** Bytes of every file not yet deleted (JOURNAL_MAX_BYTES bounds it). */
  get bytes(): number {
    return this.heldBytes;
  }

  get capacity(): number {
    return this.maxBytes;
  }

  /** Records not yet acknowledged whole: in flight, and left by an earlier process to be produced again. */
  get records(): number {
    return this.inFlight.size + this.recovery.records;
  }

  /** Points of the records left by an earlier process not yet handed out (an estimate until each file is read). */
  get recoveredPoints(): number {
    return this.recovery.points;
  }

  /** Points of the records in flight not yet acknowledged. */
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
    for (const segment of this.segments) closeSegment(this.files, segment);
    this.spares.close();
  }
}
