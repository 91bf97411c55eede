// One segment, as the journal's core (journal.ts) keeps it: what it knows of it (Segment), and its
// files: the segment started (created new, or a spare written over), a record written into it, read
// back (this version's records or an earlier one's) or counted by its headers; its marks appended and
// read; and both given up once all its records are done.
//
// How a record is written. In JOURNAL_SYNC=process mode, on a file system that keeps allocated blocks
// allocated (native.ts), a segment file is allocated whole and mapped into memory when it is started,
// and a record is copied into the mapping: the page cache is the file, so the record outlives the
// process just as a written one does, for a copy instead of a system call. A spare keeps its mapping
// for its next use. In disk mode (a mapped page written after its fdatasync faults again, which costs
// more than the write), where the disk cannot give a whole segment (nearly full), or on other file
// systems, records are written with pwritev.
import type { JournalFiles } from './files.js';
import { isNoRoom, JournalError } from './journal-error.js';
import { decodeLegacyMarks, isLegacySegment, legacyRecordBytes, readSpillFile, scanLegacySegment } from './legacy.js';
import { decodeMarks, encodeMarks } from './marks.js';
import { readHeader, readRecordAt, RECORD_HEADER_BYTES, scanSegment, type JournalRecord, type SegmentItem } from './record.js';
import { marksFilesOf, marksPath, unlinkIfThere, type Spare, type Spares } from './slot-files.js';

export interface Segment {
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
  /** Records in it (recovered: as its headers counted them at open, then as read), and of those, done. */
  records: number;
  done: number;
  /** Takes no more records: rolled over, or recovered and read to its end. */
  sealed: boolean;
  /** Left by an earlier process: read, never written. Once done it is deleted, never kept as a spare (slot-files.ts says why). */
  readonly recovered: boolean;
  /** An earlier version's spill file, read in place: no marks, deleted once done. */
  readonly spill: boolean;
  /** Indexes marked done: written to .done at the next flushMarks(). */
  marks: number[];
  /** The .done file, open for appending once a mark was written (opened once: opening it every poll cost more than the append). */
  marksFd: number | null;
  /** Recovered: indexes already marked done by an earlier process. */
  readonly doneBefore: ReadonlySet<number>;
}

export function newSegment(
  seq: number,
  slot: number,
  path: string,
  o: { capacity: number; bytes: number; recovered?: boolean; spill?: boolean; doneBefore?: ReadonlySet<number> },
): Segment {
  return {
    seq,
    slot,
    path,
    fd: null,
    map: null,
    capacity: o.capacity,
    bytes: o.bytes,
    records: 0,
    done: 0,
    sealed: false,
    recovered: o.recovered ?? false,
    spill: o.spill ?? false,
    marks: [],
    marksFd: null,
    doneBefore: o.doneBefore ?? new Set(),
  };
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

/**
 * Starts the segment file `path`: a spare renamed to it (its mapping kept when it is large enough),
 * or a new file; then, where `mappable`, allocated whole (`capacity` bytes) and mapped. The map is
 * null where the disk could not give the whole segment (what a failed allocation took goes back: a
 * new file's blocks), and records are written one by one until the disk refuses one. Throws
 * JournalError (`full` when the disk refused for room).
 */
export function startSegmentFile(
  files: JournalFiles,
  path: string,
  spare: Spare | undefined,
  capacity: number,
  mappable: boolean,
): { fd: number; map: Uint8Array | null } {
  let fd: number;
  let map: Uint8Array | null = null;
  try {
    if (spare === undefined) fd = files.create(path);
    else {
      files.rename(spare.path, path);
      fd = files.openWrite(path);
      if (spare.map !== null && spare.map.byteLength >= capacity) map = spare.map;
      else if (spare.map !== null) files.unmap(spare.map);
    }
  } catch (err) {
    throw new JournalError(`cannot create the journal file ${path}: ${(err as Error).message}`, { cause: err, full: isNoRoom(err) });
  }
  if (map === null && mappable) {
    map = files.map(fd, capacity);
    if (map === null && spare === undefined) {
      try {
        files.truncate(fd, 0);
      } catch {
        /* the space stays taken until the file is reused or deleted */
      }
    }
  }
  return { fd, map };
}

/** Writes a record's parts at `position` with pwritev, what a short write left too; throws what the disk said. */
export function writeRecordAt(files: JournalFiles, fd: number, parts: readonly Uint8Array[], bytes: number, position: number): void {
  let written = files.writeAt(fd, parts, position);
  // writev may write part of it (a disk nearly full): the rest, or the error that says why.
  while (written < bytes) written += files.writeAt(fd, rest(parts, written), position + written);
}

/** What is left of `parts` after their first `written` bytes. */
function rest(parts: readonly Uint8Array[], written: number): Uint8Array[] {
  let skip = written;
  const out: Uint8Array[] = [];
  for (const p of parts) {
    if (skip >= p.byteLength) {
      skip -= p.byteLength;
      continue;
    }
    out.push(skip === 0 ? p : p.subarray(skip));
    skip = 0;
  }
  return out;
}

/**
 * The records and damage of segment `seq`'s file: of this version, or of an earlier one's (legacy.ts)
 * when the file starts with its magic and holds no record of this version's (a byte flipped in the
 * first record's magic does not make a segment of this version an earlier one's).
 */
export function readSegmentFile(buf: Buffer, seq: number): SegmentItem[] {
  const items = [...scanSegment(buf, seq)];
  if (isLegacySegment(buf) && !items.some((item) => item.kind === 'record')) return [...scanLegacySegment(buf, seq)];
  return items;
}

/**
 * A recovered segment's records not marked done, its file read whole (at most 16 MiB usually), each
 * damage reported to `damaged`; the records not given back (done before, or damaged) count as done
 * already, so the segment goes once the others are. Throws JournalError when the file cannot be read:
 * it stays, for the next process to read.
 */
export function readLeftRecords(
  files: JournalFiles,
  segment: Segment,
  damaged: (at: number, records: number, what: string) => void,
): { index: number; record: JournalRecord }[] {
  let buf: Buffer;
  try {
    buf = files.readFile(segment.path);
  } catch (err) {
    throw new JournalError(`cannot read the journal file ${segment.path}: ${(err as Error).message}`, { cause: err });
  }
  if (segment.spill) segment.bytes = buf.byteLength;
  const records: { index: number; record: JournalRecord }[] = [];
  let count = 0;
  for (const item of segment.spill ? readSpillFile(buf) : readSegmentFile(buf, segment.seq)) {
    if (item.kind === 'damaged') {
      damaged(item.at, item.records, item.what);
      count += item.records;
      continue;
    }
    count = item.index + 1;
    if (!segment.doneBefore.has(item.index)) records.push({ index: item.index, record: item.record });
  }
  segment.records = count;
  segment.done = count - records.length;
  segment.sealed = true;
  return records;
}

/**
 * The records of a segment file, their bytes and each one's points, by their headers alone: an
 * estimate for the metrics, the limit and drain's progress until the file is read (a damaged header stops the count; reading then goes on past it).
 */
export function countRecords(files: JournalFiles, path: string, seq: number): { records: number; bytes: number; points: number[] } {
  let fd: number;
  try {
    fd = files.openRead(path);
  } catch {
    return { records: 0, bytes: 0, points: [] };
  }
  let at = 0;
  let count = 0;
  const points: number[] = [];
  try {
    const size = files.size(fd);
    const header = Buffer.alloc(RECORD_HEADER_BYTES);
    while (at + RECORD_HEADER_BYTES <= size && files.read(fd, header, at) === RECORD_HEADER_BYTES) {
      // Records of this segment in a row: a spare's earlier records (another number) are not counted.
      const h = readHeader(header, 0);
      const bytes = h === null ? legacyRecordBytes(header, seq) : h.segment === seq && h.index === count ? h.bytes : null;
      if (bytes === null || at + bytes > size) break;
      at += bytes;
      count++;
      points.push(h?.count ?? 0);
    }
  } catch {
    /* a read the disk failed: an estimate still; reading the segment says the rest */
  } finally {
    files.close(fd);
  }
  return { records: count, bytes: at, points };
}

/** The records of segment `seq` (file `walPath`) marked done: its .done file, and an earlier version's .acks. A marks file that cannot be read marks nothing: its records come back, duplicates. */
export function readMarks(files: JournalFiles, walPath: string, seq: number): Set<number> {
  const read = (path: string): Buffer | null => {
    try {
      return files.readFile(path);
    } catch {
      return null;
    }
  };
  const paths = marksFilesOf(walPath);
  const done = decodeMarks(read(paths.done) ?? Buffer.alloc(0), seq);
  const legacy = read(paths.legacy);
  if (legacy !== null) for (const index of decodeLegacyMarks(legacy)) done.add(index);
  return done;
}

/** Closes what the segment has open and unmaps it: what was copied into a mapping is in the page cache, and unmapping loses nothing. */
export function closeSegment(files: JournalFiles, segment: Segment): void {
  closeMarks(files, segment);
  if (segment.fd !== null) files.close(segment.fd);
  segment.fd = null;
  if (segment.map !== null) files.unmap(segment.map);
  segment.map = null;
}

/** Appends the marks of the segment's records done since the last call. One that cannot be written costs a duplicate after a restart, never a point. */
export function appendMarks(files: JournalFiles, segment: Segment): void {
  const marks = encodeMarks(segment.seq, segment.marks);
  segment.marks = [];
  try {
    segment.marksFd ??= files.openAppend(marksPath(segment.path));
    files.append(segment.marksFd, marks);
  } catch {
    /* a duplicate after a restart, as said */
  }
}

/**
 * Gives up a segment all done: its file kept as a spare (`spares`, when given and not all there) or
 * deleted, then its marks. The segment first: its marks without it are deleted at the next open, while
 * it without its marks would come back whole.
 */
export function retireSegment(files: JournalFiles, segment: Segment, spares: Spares | null): void {
  if (segment.fd !== null) files.close(segment.fd);
  segment.fd = null;
  closeMarks(files, segment);
  const map = segment.map;
  segment.map = null;
  segment.marks = [];
  const kept = spares !== null && spares.keep(segment.path, map);
  try {
    if (!kept) {
      unlinkIfThere(files, segment.path);
      if (map !== null) files.unmap(map);
    }
    if (!segment.spill) {
      const marks = marksFilesOf(segment.path);
      unlinkIfThere(files, marks.done);
      if (segment.recovered) unlinkIfThere(files, marks.legacy);
    }
  } catch {
    // A file the disk would not delete: it is read again at the next start, its records marked done
    // (or, should its marks be gone already, produced again: duplicates, never a loss).
  }
}

/** The record `index` this process wrote at byte `at` of a segment, read back whole. Throws JournalError when it cannot be. */
export function readRecordBack(files: JournalFiles, segment: Segment, index: number, at: number): JournalRecord {
  const fail = (what: string) => new JournalError(`cannot read back record ${index} of ${segment.path} at byte ${at}: ${what}`);
  if (at < 0) throw fail('a record an earlier process left is read with its segment');
  if (segment.map !== null) {
    const found = readRecordAt(Buffer.from(segment.map.buffer, segment.map.byteOffset, segment.bytes), at);
    if (found === null) throw fail('it does not check');
    return found;
  }
  let fd: number;
  try {
    fd = segment.fd ?? files.openRead(segment.path);
  } catch (err) {
    throw fail((err as Error).message);
  }
  try {
    const head = Buffer.alloc(RECORD_HEADER_BYTES);
    files.read(fd, head, at);
    const header = readHeader(head, 0);
    if (header === null) throw fail('its header does not check');
    const buf = Buffer.alloc(Math.min(header.bytes, segment.bytes - at));
    files.read(fd, buf, at);
    const found = readRecordAt(buf, 0);
    if (found === null) throw fail('it does not check');
    return found;
  } catch (err) {
    throw err instanceof JournalError ? err : fail((err as Error).message);
  } finally {
    if (segment.fd === null) files.close(fd);
  }
}
