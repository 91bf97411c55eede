// After a write the disk refused for room (ENOSPC, EDQUOT), whether the journal's file system has room
// again: statfs at most once a second, not on every request, and room for twice the record refused,
// so that the first record taken again is not refused at once.
import type { JournalFiles } from './files.js';
import type { JournalError } from './journal-error.js';

const PROBE_INTERVAL_MS = 1_000;

export class RoomProbe {
  private refusedWith: JournalError | null = null;
  private refusedBytes = 0;
  private lastProbeAt = 0;

  constructor(
    private readonly files: JournalFiles,
    private readonly dir: string,
  ) {}

  /** A write of `bytes` was refused for room (a new segment's file: the last record's size is kept). */
  refused(err: JournalError, bytes = this.refusedBytes): void {
    this.refusedWith = err;
    this.refusedBytes = bytes;
  }

  /** A write went through: there is room. */
  cleared(): void {
    this.refusedWith = null;
  }

  /** The last write's refusal, or null once one went through or the disk has room again. */
  get refusal(): JournalError | null {
    return this.refusedWith;
  }

  /** Whether records can be written for room: none refused since the last that went through, or the disk has room again. */
  hasRoom(): boolean {
    if (this.refusedWith === null) return true;
    const now = Date.now();
    if (now - this.lastProbeAt < PROBE_INTERVAL_MS) return false;
    this.lastProbeAt = now;
    try {
      if (this.files.freeBytes(this.dir) >= 2 * this.refusedBytes) this.refusedWith = null;
    } catch {
      /* still refused */
    }
    return this.refusedWith === null;
  }
}
