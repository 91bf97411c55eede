// Every file operation of the write-ahead journal, behind one narrow interface: the service uses the
// real one (Node's fs and the journal's addon, native.ts); the power-cut tests use a file system that
// remembers what was never synced and forgets it when they cut the power
// (test/helpers/crashable-files.ts, docs/reliability.md). The way RocksDB's FaultInjectionTestFS and
// SQLite's crash-test VFS prove their durability: the journal cannot reach the disk but through here.
//
// Calls throw as Node's fs does (an Error with `code`: ENOENT, EEXIST, ENOSPC...). The methods are
// plain functions on a frozen object: the seam costs one property load per call on the hot path.
import {
  closeSync,
  fdatasync,
  fdatasyncSync,
  fstatSync,
  fsync,
  fsyncSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  statfsSync,
  unlinkSync,
  writeSync,
  writevSync,
} from 'node:fs';
import { lockFile, mappableFileSystem, mapSegment, unmapSegment } from './native.js';

export type SyncDone = (err: Error | null) => void;

export interface JournalFiles {
  /** Creates the directory (and its parents) if missing; returns the first directory it created, or undefined when none. */
  makeDir(dir: string): string | undefined;
  /** The names in the directory. */
  list(dir: string): string[];
  /** Creates a new file for reading and writing; EEXIST when it exists. Returns its descriptor. */
  create(path: string): number;
  /** Opens an existing file for reading and writing. */
  openWrite(path: string): number;
  /** Opens a file for appending, created if missing. */
  openAppend(path: string): number;
  /** Opens an existing file for reading. */
  openRead(path: string): number;
  close(fd: number): void;
  /** Writes the parts one after another at `position` (pwritev); returns the bytes written, which may be fewer. */
  writeAt(fd: number, parts: readonly Uint8Array[], position: number): number;
  /** Writes at the end of a file opened with openAppend; returns the bytes written. */
  append(fd: number, data: Uint8Array): number;
  /** Reads into `into` from `position`; returns the bytes read. */
  read(fd: number, into: Uint8Array, position: number): number;
  /** The whole file. */
  readFile(path: string): Buffer;
  /** The file's size. */
  size(fd: number): number;
  /** Cuts (or extends with zeros) the file to `length` bytes. */
  truncate(fd: number, length: number): void;
  rename(from: string, to: string): void;
  unlink(path: string): void;
  /** fdatasync, from the threadpool: the file's data and what reading it back needs are on the disk when `done` is called. */
  datasync(fd: number, done: SyncDone): void;
  /** fdatasync, on the calling thread. */
  datasyncSync(fd: number): void;
  /** fsync of the directory, from the threadpool: its entries (files created, renamed, deleted) are on the disk when `done` is called. */
  syncDir(dir: string, done: SyncDone): void;
  /** fsync of the directory, on the calling thread. */
  syncDirSync(dir: string): void;
  /** Bytes free for an unprivileged writer on the file system under `dir` (statfs). */
  freeBytes(dir: string): number;
  /** The file system under `dir` when segments can be mapped there (ext4, XFS, tmpfs), else null. */
  mappable(dir: string): string | null;
  /** The first `bytes` bytes of the file allocated on the disk and mapped into memory; null when that cannot be had now. */
  map(fd: number, bytes: number): Uint8Array | null;
  /** Ends a mapping from map(): its view reads as empty afterwards. */
  unmap(map: Uint8Array): void;
  /**
   * Opens the file (created if missing) and takes an exclusive lock on it without waiting (flock):
   * the descriptor, holding the lock until it is closed (or the process ends), or null when another
   * open of the file holds it.
   */
  lock(path: string): number | null;
}

/** The journal's files on the real disk: Node's fs, and the journal's addon for mappings. */
export const diskFiles: JournalFiles = Object.freeze({
  makeDir: (dir: string) => mkdirSync(dir, { recursive: true }),
  list: (dir: string) => readdirSync(dir),
  create: (path: string) => openSync(path, 'wx+'), // read and write: a mapping needs both
  openWrite: (path: string) => openSync(path, 'r+'),
  openAppend: (path: string) => openSync(path, 'a'),
  openRead: (path: string) => openSync(path, 'r'),
  close: (fd: number) => closeSync(fd),
  writeAt: (fd: number, parts: readonly Uint8Array[], position: number) => writevSync(fd, parts as Uint8Array[], position),
  append: (fd: number, data: Uint8Array) => writeSync(fd, data),
  read: (fd: number, into: Uint8Array, position: number) => readSync(fd, into, 0, into.byteLength, position),
  readFile: (path: string) => readFileSync(path),
  size: (fd: number) => fstatSync(fd).size,
  truncate: (fd: number, length: number) => ftruncateSync(fd, length),
  rename: (from: string, to: string) => renameSync(from, to),
  unlink: (path: string) => unlinkSync(path),
  datasync: (fd: number, done: SyncDone) => fdatasync(fd, done),
  datasyncSync: (fd: number) => fdatasyncSync(fd),
  syncDir: (dir: string, done: SyncDone) => {
    let fd: number;
    try {
      fd = openSync(dir, 'r');
    } catch (err) {
      return done(err as Error);
    }
    fsync(fd, (err) => {
      closeSync(fd);
      done(err);
    });
  },
  syncDirSync: (dir: string) => {
    const fd = openSync(dir, 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  },
  freeBytes: (dir: string) => {
    const fs = statfsSync(dir);
    return fs.bavail * fs.bsize;
  },
  mappable: (dir: string) => mappableFileSystem(dir),
  map: (fd: number, bytes: number) => mapSegment(fd, bytes),
  unmap: (map: Uint8Array) => unmapSegment(map),
  lock: (path: string) => {
    const fd = openSync(path, 'a+');
    try {
      if (lockFile(fd)) return fd;
    } catch (err) {
      closeSync(fd);
      throw err;
    }
    closeSync(fd);
    return null;
  },
});
