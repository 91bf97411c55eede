// The files of the journal's slots in JOURNAL_DIR: their names, what a journal finds of them when it
// opens, the reservation of segment numbers, the spare segment files kept to be written over, and the
// journal directory itself, made durable when it is created.
//
//   slot-<slot>.<seq>.wal      a segment: records (record.ts)
//   slot-<slot>.<seq>.done     its marks: the records done (marks.ts)
//   slot-<slot>.<seq>.spare    a segment all done, kept to be written over as a later one (Spares)
//   slot-<slot>.<limit>.next   the reservation: no segment number at or above <limit> was used (SeqReservation)
//   slot-<slot>.lock           held by the process that has the slot; service.lock by the primary (slot-lock.ts)
//   and an earlier version's: slot-<slot>.<seq>.acks, worker-<slot>.<seq>.spill (legacy.ts)
import { dirname, join } from 'node:path';
import type { JournalFiles } from './files.js';
import { isNoRoom, JournalError } from './journal-error.js';
import { LEGACY_MARKS_SUFFIX, SPILL_FILE_RE } from './legacy.js';
import { MARKS_SUFFIX } from './marks.js';

/** Any file of a slot's: segments, spares, marks, and the reservation of its numbers. */
const SLOT_FILE_RE = /^slot-(\d+)\.(\d{12})\.(wal|spare|done|acks|next)$/;
/** Segment numbers reserved at a time (a directory fsync each: once per this many segments). */
const SEQ_BLOCK = 1000;

const seqName = (seq: number) => String(seq).padStart(12, '0');

export function segmentPath(dir: string, slot: number, seq: number): string {
  return join(dir, `slot-${slot}.${seqName(seq)}.wal`);
}

/** The marks file of a segment (an earlier version's `.acks` with LEGACY_MARKS_SUFFIX). */
export function marksPath(walPath: string, suffix = MARKS_SUFFIX): string {
  return walPath.slice(0, -'.wal'.length) + suffix;
}

function sparePath(walPath: string): string {
  return walPath.slice(0, -'.wal'.length) + '.spare';
}

/**
 * Creates the directory if missing, and makes its entry durable: an fsync of the parent of every
 * directory it created. Without it a power cut soon after could take the whole directory, with every
 * record in it that was answered 202 (Linux's fsync(2): an fsync of the file "does not necessarily
 * ensure that the entry in the directory containing the file has also reached disk").
 */
export function makeDurableDir(files: JournalFiles, dir: string): void {
  const created = files.makeDir(dir);
  if (created === undefined) return;
  const levels: string[] = [];
  for (let level = dir; ; level = dirname(level)) {
    levels.push(level);
    if (level === created || dirname(level) === level) break;
  }
  for (const level of levels.reverse()) files.syncDirSync(dirname(level));
}

/** The slots that have files in the directory (segments, marks, an earlier version's spill files): slot 0 takes those at or above WORKERS. */
export function slotsWithFiles(names: readonly string[]): Set<number> {
  const slots = new Set<number>();
  for (const name of names) {
    const m = SLOT_FILE_RE.exec(name) ?? SPILL_FILE_RE.exec(name);
    if (m !== null && !name.endsWith('.next')) slots.add(Number(m[1]));
  }
  return slots;
}

/** What a journal finds of its slots' files when it opens. */
export interface FoundFiles {
  /** Segments left by an earlier process, by slot then number. */
  readonly segments: readonly { slot: number; seq: number; path: string }[];
  /** An earlier version's spill files, in order. */
  readonly spills: readonly string[];
  /** The own slot's next segment number: past every file of the slot, marks included. */
  readonly nextSeq: number;
  /** The own slot's reservation file and its limit, or null. */
  readonly reservation: { path: string; upTo: number } | null;
}

/**
 * The files of the slots `claimed` (slot `slot` first among them) in `names`, and the clean-up an
 * opening journal owes them: spares found are deleted (after a power cut a spare may hold records of
 * a higher number than its name says: a rename to its next use that did not reach the disk, and a new
 * segment of that number written over it would read them back as its own; only this process's spares
 * are written over), and so are marks without their segment (its deletion, or its name, reached the
 * disk; a new segment of that number would take them for its own: the power-cut test, seed 87), and
 * reservations older than the highest. A file the disk will not delete stays, harmless: new segment
 * numbers go on past every file found, and a spare is only ever this process's own.
 */
export function findSlotFiles(files: JournalFiles, dir: string, slot: number, claimed: ReadonlySet<number>, names: readonly string[]): FoundFiles {
  const segments: { slot: number; seq: number; path: string }[] = [];
  const spills: string[] = [];
  const segmentKeys = new Set<string>();
  let nextSeq = 0;
  let reservation: { path: string; upTo: number } | null = null;
  for (const name of names) {
    const m = SLOT_FILE_RE.exec(name);
    if (m === null) {
      const l = SPILL_FILE_RE.exec(name);
      if (l !== null && claimed.has(Number(l[1]))) spills.push(join(dir, name));
      continue;
    }
    const [, slotText, seqText, kind] = m;
    const fileSlot = Number(slotText);
    const seq = Number(seqText);
    if (!claimed.has(fileSlot)) continue;
    // Numbers go on from the highest any file of the slot has, marks included, and from its reservation.
    if (fileSlot === slot) nextSeq = Math.max(nextSeq, kind === 'next' ? seq : seq + 1);
    if (kind === 'next') {
      if (fileSlot !== slot) continue;
      const path = join(dir, name);
      // One reservation: the highest (after a power cut, an older name may be back beside it).
      if (reservation !== null && seq <= reservation.upTo) removeQuietly(files, path);
      else {
        if (reservation !== null) removeQuietly(files, reservation.path);
        reservation = { path, upTo: seq };
      }
    } else if (kind === 'wal') {
      segments.push({ slot: fileSlot, seq, path: join(dir, name) });
      segmentKeys.add(`${fileSlot}.${seqText}`);
    } else if (kind === 'spare') removeQuietly(files, join(dir, name));
  }
  for (const name of names) {
    const m = SLOT_FILE_RE.exec(name);
    if (m !== null && (m[3] === 'done' || m[3] === 'acks') && claimed.has(Number(m[1])) && !segmentKeys.has(`${m[1]}.${m[2]}`))
      removeQuietly(files, join(dir, name));
  }
  segments.sort((a, b) => a.slot - b.slot || a.seq - b.seq);
  spills.sort();
  return { segments, spills, nextSeq, reservation };
}

/** The paths of a segment's marks files: its own, and an earlier version's. */
export function marksFilesOf(walPath: string): { done: string; legacy: string } {
  return { done: marksPath(walPath), legacy: marksPath(walPath, LEGACY_MARKS_SUFFIX) };
}

/**
 * Segment numbers, reserved on the disk SEQ_BLOCK at a time by the name of an empty file,
 * `slot-<slot>.<limit>.next` (created, then renamed to each next limit, and the directory synced
 * before a number of the new block is used), so that they never go back: not when every segment was
 * deleted (the numbers began again at 0), and not after a power cut that brings back files whose
 * deletion had not reached the disk. A number used twice had its old segment's records, all
 * acknowledged long ago, read back after newer ones (the power-cut test, seed 757).
 */
export class SeqReservation {
  private next: number;
  private path: string | null;
  private upTo: number;

  constructor(
    private readonly files: JournalFiles,
    private readonly dir: string,
    private readonly slot: number,
    found: FoundFiles,
  ) {
    this.next = found.nextSeq;
    this.path = found.reservation?.path ?? null;
    this.upTo = found.reservation?.upTo ?? 0;
  }

  /** The next segment number. Throws JournalError when the next block cannot be reserved. */
  take(): number {
    if (this.next >= this.upTo) {
      const limit = this.next + SEQ_BLOCK;
      const path = join(this.dir, `slot-${this.slot}.${seqName(limit)}.next`);
      try {
        if (this.path === null) this.files.close(this.files.create(path));
        else this.files.rename(this.path, path);
        this.files.syncDirSync(this.dir);
      } catch (err) {
        throw new JournalError(`cannot reserve journal segment numbers (${path}): ${(err as Error).message}`, { cause: err, full: isNoRoom(err) });
      }
      this.path = path;
      this.upTo = limit;
    }
    return this.next++;
  }
}

/** A segment file all done, kept to be written over, with its mapping. */
export interface Spare {
  readonly path: string;
  readonly map: Uint8Array | null;
}

/**
 * Done segment files kept to be written over by the next segments (two at most), this process's own:
 * writing over pages the OS already holds costs less than half of writing new ones, and new pages were
 * most of the journal's cost on the live service. Records of the file's earlier use, left past the new ones, carry their old
 * segment number, which tells them apart (record.ts).
 */
export class Spares {
  private readonly kept: Spare[] = [];

  constructor(
    private readonly files: JournalFiles,
    private readonly max: number,
    /** A file of the directory was renamed: the next group commit syncs the directory (JOURNAL_SYNC=disk). */
    private readonly dirChanged: () => void,
  ) {}

  /** A spare to write the next segment over, or undefined. */
  take(): Spare | undefined {
    return this.kept.shift();
  }

  /** Keeps the segment file as a spare when there is room: true, or false (the caller deletes it). */
  keep(walPath: string, map: Uint8Array | null): boolean {
    if (this.kept.length >= this.max) return false;
    const path = sparePath(walPath);
    try {
      this.files.rename(walPath, path);
    } catch {
      return false;
    }
    this.kept.push({ path, map });
    this.dirChanged();
    return true;
  }

  /** Unmaps every spare's mapping (the files stay: deleted by the next process to open the slot). */
  close(): void {
    for (const spare of this.kept) if (spare.map !== null) this.files.unmap(spare.map);
    this.kept.length = 0;
  }
}

export function unlinkIfThere(files: JournalFiles, path: string): void {
  try {
    files.unlink(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

/** Deletes a file left over, whatever the disk says: the next opening of the slot tries again. */
function removeQuietly(files: JournalFiles, path: string): void {
  try {
    files.unlink(path);
  } catch {
    /* see above */
  }
}
