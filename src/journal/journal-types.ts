// What a journal (journal.ts) is opened with, and its handle on a record until the record is done:
// where it is, and what it holds.
import type { JournalFiles } from './files.js';
import type { JournalError } from './journal-error.js';
import type { JournalRecord } from './record.js';
import type { Segment } from './segment-file.js';
import type { SlotClaim } from './slot-lock.js';

/** Where a record is, and what it holds: the journal's handle on it until it is done. */
export interface JournalEntry {
  readonly segment: Segment;
  readonly index: number;
  /** Where it starts in its segment's file, bytes; -1 for a record an earlier process left (read back already). */
  readonly at: number;
  readonly points: number;
  /** When it was accepted, ms since the epoch (its Kafka timestamp). */
  readonly timestamp: number;
}

/** A record read back from what an earlier process left, not done yet. */
export interface RecoveredEntry {
  readonly record: JournalRecord;
  readonly entry: JournalEntry;
}

export type JournalSync = 'process' | 'disk';

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
