// What earlier processes left in the journal, read back in the order it was written: the segments
// still to read, the records read and not yet handed out, and how many records and points wait (an
// estimate until each file is read: counted from the headers at open, put right as each is read).
// The journal (journal.ts) hands each record out again until it is done.
import type { JournalFiles } from './files.js';
import type { JournalError } from './journal-error.js';
import type { JournalRecord } from './record.js';
import { countRecords, newSegment, readLeftRecords, readMarks, type Segment } from './segment-file.js';
import type { FoundFiles } from './slot-files.js';

export interface LeftRecord {
  readonly segment: Segment;
  readonly index: number;
  readonly record: JournalRecord;
}

export interface RecoveryOptions {
  files: JournalFiles;
  /** Records of `file` found damaged, `records` of them from byte `at`: counted and skipped. */
  damaged: (file: string, at: number, records: number, what: string) => void;
  /** A segment read whole, holding `records` records not marked done. */
  read: (segment: Segment, records: number) => void;
  /** A segment that cannot be read: the journal fails (the segment stays, for the next process). */
  failed: (err: JournalError) => void;
}

export class Recovery {
  private readonly toRead: Segment[] = [];
  private queue: LeftRecord[] = [];
  private recordsLeft = 0;
  private pointsLeft = 0;
  private readonly counted = new Map<Segment, number>();

  constructor(private readonly opts: RecoveryOptions) {}

  /** An earlier version's spill file, read where it is when its turn comes. */
  addSpill(segment: Segment): void {
    this.toRead.push(segment);
  }

  /** A segment counted at open (headers only): `records` records and `points` points not marked done. */
  addSegment(segment: Segment, records: number, points: number): void {
    this.toRead.push(segment);
    this.recordsLeft += records;
    this.pointsLeft += points;
    this.counted.set(segment, points);
  }

  /** Whether records are left to hand out. */
  get recovering(): boolean {
    return this.toRead.length > 0 || this.queue.length > 0;
  }

  get records(): number {
    return this.recordsLeft;
  }

  get points(): number {
    return this.pointsLeft;
  }

  /** The next record left, in the order written; undefined once none is. Throws JournalError when a segment cannot be read. */
  next(): LeftRecord | undefined {
    while (this.queue.length === 0) {
      const segment = this.toRead[0];
      if (segment === undefined) {
        this.recordsLeft = 0;
        this.pointsLeft = 0;
        return undefined;
      }
      this.queue = this.read(segment);
      this.toRead.shift();
    }
    const next = this.queue.shift()!;
    this.recordsLeft = Math.max(0, this.recordsLeft - 1);
    this.pointsLeft = Math.max(0, this.pointsLeft - next.record.count);
    return next;
  }

  /** A segment's records not marked done (segment-file.ts, readLeftRecords); the counts put right. */
  private read(segment: Segment): LeftRecord[] {
    const counted = Math.max(0, segment.records - segment.doneBefore.size);
    let records;
    try {
      records = readLeftRecords(this.opts.files, segment, (at, n, what) => this.opts.damaged(segment.path, at, n, what));
    } catch (err) {
      this.opts.failed(err as JournalError);
      throw err;
    }
    this.recordsLeft = Math.max(0, this.recordsLeft + records.length - counted);
    const points = records.reduce((sum, r) => sum + r.record.count, 0);
    this.pointsLeft = Math.max(0, this.pointsLeft + points - (this.counted.get(segment) ?? 0));
    this.counted.delete(segment);
    this.opts.read(segment, records.length);
    return records.map((r) => ({ segment, ...r }));
  }
}

/**
 * The segments earlier processes left (found by slot-files.ts), oldest first, each added to
 * `recovery`: counted now from their headers, read when their turn comes, so that the metrics say
 * what waits from the start. An earlier version's spill files come first (their points are the
 * oldest), read where they are: written into a segment instead, a crash between that and their
 * deletion gave their points back twice.
 */
export function leftSegments(files: JournalFiles, slot: number, found: FoundFiles, recovery: Recovery): Segment[] {
  const segments: Segment[] = [];
  for (const path of found.spills) {
    const segment = newSegment(-1, slot, path, { capacity: 0, bytes: 0, recovered: true, spill: true });
    segments.push(segment);
    recovery.addSpill(segment);
  }
  for (const f of found.segments) {
    // A mapped segment's file is longer than its records: the records' bytes are what the limit counts.
    const { records, bytes, points } = countRecords(files, f.path, f.seq);
    const segment = newSegment(f.seq, f.slot, f.path, { capacity: bytes, bytes, recovered: true, doneBefore: readMarks(files, f.path, f.seq) });
    segment.records = records;
    segments.push(segment);
    const left = points.reduce((sum, n, index) => (segment.doneBefore.has(index) ? sum : sum + n), 0);
    recovery.addSegment(segment, Math.max(0, records - segment.doneBefore.size), left);
  }
  return segments;
}
