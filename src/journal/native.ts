// What the journal needs that Node does not give, from the addon of our own
// (native/journal-files: one C file, Node-API, built by node-gyp at install):
//   - a segment file allocated on the disk whole and mapped into memory, shared with the file: a
//     record is then written with a copy instead of a system call, and is in the OS's page cache,
//     which outlives the process, as soon as it is copied;
//   - CRC-32C with the CPU's instruction (zlib's CRC-32 costs more than twice as much), and a
//     record's two checks sealed in one call;
//   - flock(2), the lock one process holds on a journal slot (slot-lock.ts).
import { statfsSync } from 'node:fs';
import { createRequire } from 'node:module';

interface JournalFilesBinding {
  /** The file's blocks up to `bytes` allocated (posix_fallocate); throws an errno error (ENOSPC...). */
  allocateFile(fd: number, bytes: number): void;
  /** The file's first `bytes` bytes as memory shared with it (MAP_SHARED). */
  mapFile(fd: number, bytes: number): ArrayBuffer;
  /** Detaches what mapFile returned, and unmaps it. */
  unmapFile(map: ArrayBuffer): void;
  /** CRC-32C of `first`, then `second`. */
  crc32c(first: Uint8Array, second?: Uint8Array): number;
  /** A record's two checks written into its head's first `headBytes` bytes (record.ts). */
  sealRecord(head: Uint8Array, headBytes: number, data: Uint8Array): void;
  /** flock(fd, LOCK_EX | LOCK_NB): true, or false when another open of the file holds it; throws an errno error otherwise. */
  lockFile(fd: number): boolean;
}

// Its index.js names the platform and what to install when the addon does not load.
const files = createRequire(import.meta.url)('@track-ingest/journal-files') as JournalFilesBinding;

/**
 * CRC-32C (Castagnoli) of `first` followed by `second`, in one native call: for a record of one point
 * the call costs more than the CRC.
 */
export const crc32c: (first: Uint8Array, second?: Uint8Array) => number = files.crc32c;

/**
 * A record's body check (CRC-32C of the head past its header, then the data) and then its header
 * check, written into the head (record.ts has the layout): one native call per record, as one check
 * cost before there were two.
 */
export const sealRecord: (head: Uint8Array, headBytes: number, data: Uint8Array) => void = files.sealRecord;

/** An exclusive flock(2) on the open file `fd`, without waiting: false when another holds it. */
export const lockFile: (fd: number) => boolean = files.lockFile;

/**
 * The file systems on which a mapped segment is safe: there, blocks allocated by fallocate stay
 * allocated when written over, so a write into the mapping never meets a full disk (which would be
 * a SIGBUS, not an error). Copy-on-write file systems (btrfs, ZFS) and network ones give no such
 * promise: the journal writes records with pwritev there. statfs(2) f_type values.
 */
const MAPPABLE_FILE_SYSTEMS = new Map<number, string>([
  [0xef53, 'ext4'],
  [0x58465342, 'xfs'],
  [0x01021994, 'tmpfs'],
]);

/** The file system under `dir` when segments can be mapped there, else null. */
export function mappableFileSystem(dir: string): string | null {
  try {
    return MAPPABLE_FILE_SYSTEMS.get(Number(statfsSync(dir).type)) ?? null;
  } catch {
    return null;
  }
}

/**
 * The first `bytes` bytes of the open file `fd`, allocated on the disk and mapped; null when the disk
 * cannot give them all now (the caller writes record by record instead, and a full disk then shows
 * as a refused write).
 */
export function mapSegment(fd: number, bytes: number): Uint8Array | null {
  try {
    files.allocateFile(fd, bytes);
    return new Uint8Array(files.mapFile(fd, bytes));
  } catch {
    return null;
  }
}

/** Ends a mapping from mapSegment: its view reads as empty afterwards. */
export function unmapSegment(map: Uint8Array): void {
  files.unmapFile(map.buffer as ArrayBuffer);
}
