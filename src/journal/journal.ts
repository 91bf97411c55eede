// The write-ahead journal of one worker slot: a request's record is here before its 202, and stays
// until Kafka has every point of it, so a crash of the worker or the service loses nothing: the next
// process of the slot produces again what is left.
//
//   append ──▶ the active segment file, in the OS before the answer (JOURNAL_SYNC=disk: fdatasync'd
//     │        first, afterCommit, group-commit.ts); returns where the record is (a JournalEntry)
//   done(entry) ── Kafka has every point of it (write-ahead/ledger.ts counts them) ──▶ marked done
//     (marks.ts); a segment all done is deleted, or kept as a spare to be written over
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
import type { JournalEntry, JournalOptions, RecoveredEntry } from './journal-types.js';
import { encodeHead, RECORD_HEADER_BYTES, recordBytes, viewRecordAt, type JournalBatch, type JournalRecord } from './record.js';
import { appendMarks, closeSegment, newSegment, readRecordBack, retireSegment, startSegmentFile, writeRecordAt, type Segment } from './segment-file.js';
import { leftSegments, Recovery } from './recovery.js';
import { RoomProbe } from './room.js';
import { findSlotFiles, makeDurableDir, segmentPath, SeqReservation, Spares, type FoundFiles } from './slot-files.js';

/** A segment takes no more records past this size (a larger record still gets a segment of its own). */
export const SEGMENT_MAX_BYTES = 16 * 1024 * 1024;
/** The active segment is rolled over once everything in it is done and it holds this much. */
const ROLL_WHEN_DONE_BYTES = 1024 * 1024;
/** Done segment files kept to be written over (slot-files.ts, Spares), per slot. */
const MAX_SPARES = 2;

export { JournalError };
export type { JournalEntry, JournalOptions, JournalSync, RecoveredEntry } from './journal-types.js';

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
  private heldBytes = 0;
  /** Records appended or handed out again and not done yet. */
  private openRecords = 0;
  /** What earlier processes left, to hand out again. */
  private readonly recovery: Recovery;
  /** Set after a write refused for room; cleared once one goes through or the disk has room again. */
  private readonly room: RoomProbe;
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
    this.room = new RoomProbe(files, opts.dir);
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
    for (const segment of leftSegments(files, this.slot, found, this.recovery)) {
      this.segments.push(segment);
      this.heldBytes += segment.bytes; // a spill file's bytes are counted when it is read
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

  /** Whether records can be written: the journal has not failed, and has room (room.ts). */
  writable(): boolean {
    return this.failedWith === null && this.room.hasRoom();
  }

  /**
   * Writes the record of one accepted request; returns where it is, not done until done(). Throws
   * JournalError when the record cannot be written, having kept nothing of it: `full` when the disk
   * refused it for room, else the journal has failed.
   */
  append(batch: JournalBatch, timestamp: number): JournalEntry {
    if (this.failedWith !== null) throw this.failedWith;
    const { segment, index, at } = this.write(batch, timestamp);
    this.openRecords++;
    return { segment, index, at, points: batch.count, timestamp };
  }

  /** Writes a record into the active segment; returns where it is. */
  private write(batch: JournalBatch, timestamp: number): { segment: Segment; index: number; at: number } {
    const bytes = recordBytes(batch);
    const segment = this.activeFor(bytes);
    const index = segment.records;
    const at = segment.bytes;
    this.head = encodeHead(this.head, batch, timestamp, segment.seq, index);
    const headBytes = bytes - batch.data.byteLength;
    if (segment.map !== null) {
      // Into the page cache (activeFor made room: the segment is allocated whole), the header copied
      // last: a process killed between two copies leaves no header there, which the next reader takes
      // for the journal's end (a record never answered), where a header before its body read as damage.
      segment.map.set(this.head.subarray(RECORD_HEADER_BYTES, headBytes), at + RECORD_HEADER_BYTES);
      segment.map.set(batch.data, at + headBytes);
      segment.map.set(this.head.subarray(0, RECORD_HEADER_BYTES), at);
    } else {
      this.writeAt(segment, [this.head.subarray(0, headBytes), batch.data], bytes);
    }
    this.room.cleared();
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
    if (error.full) this.room.refused(error, bytes);
    else this.fail(error);
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
    if (err.full) this.room.refused(err);
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

  /**
   * A record this process appended, as produceBatch takes it, its data a view of the mapped segment
   * (only its offsets copied, to be aligned); null when its segment is not mapped (read it back
   * then). Valid until the journal is next called: hand it over at once. No check is made: this
   * process wrote those bytes, and the record is not done, so its segment is neither retired nor
   * written over.
   */
  view(record: JournalEntry): JournalBatch | null {
    const map = record.segment.map;
    return map === null || record.at < 0 ? null : viewRecordAt(map, record.at, record.points);
  }

  /**
   * A record this process appended, read back from its segment: DELIVERY=exactly-once produces it
   * again after an aborted transaction, the request's own buffers long reused. Throws JournalError
   * when it cannot be read back whole.
   */
  readBack(record: JournalEntry): JournalRecord {
    return readRecordBack(this.files, record.segment, record.index, record.at);
  }

  // ---- done ---------------------------------------------------------------------------------

  /** Kafka has every point of the record (or a committed transaction covers it): marked done, its segment deleted once all of it is. */
  done(entry: JournalEntry): void {
    this.openRecords--;
    this.pointsDone += entry.points;
    const segment = entry.segment;
    segment.done++;
    segment.marks.push(entry.index);
    // An active segment whose records are all done need not wait to fill up before it goes.
    if (segment === this.active && segment.done === segment.records && (segment.bytes >= ROLL_WHEN_DONE_BYTES || this.room.refusal !== null))
      this.seal(segment);
    else this.deleteIfDone(segment);
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
    const spares = !segment.recovered && segment.slot === this.slot && this.room.refusal === null && this.failedWith === null ? this.spares : null;
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
   * written, each open again until done(); none once all are handed out. Throws JournalError (the
   * journal then has failed) when a segment cannot be read: it stays, for the next process to read.
   */
  nextRecovered(max: number): RecoveredEntry[] {
    const out: RecoveredEntry[] = [];
    while (out.length < max) {
      const next = this.recovery.next();
      if (next === undefined) break;
      const { record } = next;
      this.openRecords++;
      out.push({ record, entry: { segment: next.segment, index: next.index, at: -1, points: record.count, timestamp: record.timestamp } });
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
    return this.room.refusal;
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

  /** Records not done: appended or handed out again, and left by an earlier process to be handed out. */
  get records(): number {
    return this.openRecords + this.recovery.records;
  }

  /** Points of the records left by an earlier process not yet handed out (an estimate until each file is read). */
  get recoveredPoints(): number {
    return this.recovery.points;
  }

  /** Writes the marks, syncs (disk mode) and closes; what is not done stays for the next start. */
  close(): void {
    // Disk mode: what waits for a commit is synced and answered before the files close.
    this.commits?.close();
    this.flushMarks();
    for (const segment of this.segments) closeSegment(this.files, segment);
    this.spares.close();
  }
}
