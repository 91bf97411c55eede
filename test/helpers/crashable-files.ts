// A file system in memory that can lose power, and whose disk can fail: the test double of the
// journal's file interface (src/journal/files.ts). It keeps, per file, what is durable and what was
// only written, and per directory which entries are durable; cut() draws the disk a power cut at that
// moment could leave. With `faults` set, any operation may fail with EIO or ENOSPC, as a failing disk's do.
//
// THE MODEL: what survives a power cut
//
// File data. A write is in the page cache only. fdatasync(2) returns once the file's data written
// before it, and the metadata needed to read it back (its size), are on the disk: POSIX says of
// fdatasync that "all I/O operations shall be completed as defined for synchronized I/O data
// integrity completion", and Linux's fdatasync(2) that it flushes "all modified in-core data" and the
// metadata "needed in order to allow a subsequent data retrieval to be correctly handled" (st_size
// yes, st_mtime no). Until then, at a power cut, each write since the file's last sync is,
// independently:
//   - kept whole, lost whole, or torn: cut at 512-byte (sector) or 4 KiB (page) boundaries of the
//     file, each block kept or lost. A disk writes a sector atomically at best; Linux writes back a
//     file's dirty pages in any order.
//   - A block lost comes back as what was there before, or as garbage: an unsynced sector the disk
//     was writing when the power went may read back as neither the old nor the new bytes (SQLite's
//     crash-test VFS and the ALICE study of application crash consistency, OSDI 2014, both draw it).
//   - The size the write gave the file is kept or lost apart from its data: a size kept over data
//     lost reads as zeros or garbage (XFS's "NULL files" after a crash; space allocated but never
//     written reads as zeros on ext4 and XFS alike: unwritten extents). Data kept past a size lost is
//     cut off.
//   - truncate and fallocate are kept or lost the same way, in the order they came with the writes.
// Mappings (process mode). map() returns the file's own memory: what is copied into it is in the page
// cache, like a write, and no sync covers it in process mode. At a power cut each 4 KiB page it dirtied
// is, independently, written back, lost, or garbage: the kernel writes a mapping's dirty pages back
// one by one, in any order. A crash of the process alone (cut({ keep: 'everything' })) keeps them all.
// Directory entries. creat, mkdir, rename and unlink change a directory, which is durable only after
// fsync(2) of the directory itself: "Calling fsync() does not necessarily ensure that the entry in
// the directory containing the file has also reached disk. For that an explicit fsync() on a file
// descriptor for the directory is also needed" (Linux fsync(2)). That holds for a directory's own
// entry in its parent too: a directory made and never synced in its parent is gone with everything
// in it. Until then each such change is, independently, done or not at a power cut (in order, where
// it still applies: a rename whose source is not there is not done). A file that no entry names after
// the cut is gone.
// A disk that fails (`faults`). An operation fails before it does anything, except a write, which may
// have written a part of itself. A failed fdatasync or directory fsync leaves what it should have made
// durable in limbo: after PostgreSQL's "fsyncgate" (2018), Linux may have dropped the pages whose
// writeback failed and marked them clean, so no later sync makes them durable, while reading still
// shows them. At a power cut what is in limbo is kept or lost like anything unsynced.
//
// Where it is stricter than a real disk: ext4 and XFS journal their metadata in order, so a rename
// survives only with every directory change before it, and both commit on their own every few
// seconds (ext4's commit=5, XFS's log); ext4 in data=ordered mode writes a file's new blocks before
// the size that covers them, and since Linux 2.6.30 flushes a file replaced by rename or truncate
// (auto_da_alloc). Here any subset of what was not synced survives and nothing is synced but by the
// calls: whatever holds here holds there.
// Where it is still kinder than a disk: it trusts a sync that succeeds, so a disk whose cache loses
// acknowledged writes (no flush, no FUA) is not modelled; nor are bit rot, misdirected or lost writes
// in what was synced (the records' checks are there for that, and the tests damage records on purpose
// too); a failed read fails whole, never returning wrong bytes; close never fails; and a power cut
// reaches every file at one instant.
import type { JournalFiles, SyncDone } from '../../src/journal/files.js';

/** A seeded pseudo-random generator (mulberry32): a failure replays from its seed. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type FileChange =
  { kind: 'write'; at: number; bytes: Buffer; n: number } | { kind: 'truncate'; size: number; n: number } | { kind: 'allocate'; size: number; n: number };

/** What became of a change not yet durable: still in the page cache, or in limbo after a failed sync (see above). */
type Fate = 'pending' | 'limbo' | 'settled';

const PAGE = 4096;

class Inode {
  /** What reading the file gives now. */
  data: Buffer;
  /** What a power cut keeps for sure: every change up to the first one not settled. */
  durable: Buffer;
  /** Changes after those, oldest first, each with its fate. */
  unsettled: { change: FileChange; fate: Fate }[] = [];
  /** A mapping hands out `data` itself: it must not be reallocated meanwhile. */
  mapped = false;
  /** Written through a mapping since it was made: its pages are compared at a cut. */
  mappedWrites = false;
  constructor(data: Buffer = Buffer.alloc(0)) {
    this.data = data;
    this.durable = Buffer.from(data); // never the same memory: `data` is written in place
  }
}

type DirChange =
  | { kind: 'link'; name: string; inode: Inode; n: number }
  | { kind: 'unlink'; name: string; n: number }
  | { kind: 'rename'; from: string; to: string; n: number }
  | { kind: 'mkdir'; name: string; n: number };

class Dir {
  current = new Map<string, Inode>();
  durable = new Map<string, Inode>();
  subdirs = new Set<string>();
  durableSubdirs = new Set<string>();
  pending: { change: DirChange; fate: Fate }[] = [];
}

interface OpenFile {
  readonly inode: Inode;
  readonly path: string;
  readonly append: boolean;
  readonly write: boolean;
}

/** How a power cut treats what was not synced: drawn at random, or all of it kept (a crash of the process alone), or none. */
export type CutKind = 'random' | 'everything' | 'nothing';

/** A failing disk: each operation fails with probability `rate`, with EIO or ENOSPC. */
export interface Faults {
  rate: number;
  random: () => number;
}

export interface CrashableOptions {
  /** Called after every operation that changes the disk or makes something durable: where a power cut is tried. */
  onStep?: (step: number, what: string) => void;
  /** Whether map() is offered (the journal maps segments in process mode where the file system allows). */
  mappable?: boolean;
  /** The disk's size: a write past it is cut short or refused with ENOSPC. */
  capacity?: number;
}

function fsError(code: string, syscall: string, path: string): Error {
  return Object.assign(new Error(`${code}: crashable ${syscall} '${path}'`), { code, syscall, path });
}

function split(path: string): { dir: string; name: string } {
  const slash = path.lastIndexOf('/');
  return { dir: slash <= 0 ? '/' : path.slice(0, slash), name: path.slice(slash + 1) };
}

/** `data` resized to `size`: cut, or extended with zeros. */
function resized(data: Buffer, size: number): Buffer {
  if (size === data.byteLength) return data;
  const out = Buffer.alloc(size);
  data.copy(out, 0, 0, Math.min(size, data.byteLength));
  return out;
}

/** `data` with `bytes` written at `at`: in place, or a new buffer when it grows. */
function applyWrite(data: Buffer, at: number, bytes: Uint8Array): Buffer {
  const out = at + bytes.byteLength > data.byteLength ? resized(data, at + bytes.byteLength) : data;
  out.set(bytes, at);
  return out;
}

/** `data` after a change: in place where it can be (the caller owns `data`). */
function applyChange(data: Buffer, c: FileChange): Buffer {
  if (c.kind === 'write') return applyWrite(data, c.at, c.bytes);
  if (c.kind === 'truncate') return resized(data, c.size);
  return c.size > data.byteLength ? resized(data, c.size) : data;
}

function garbage(random: () => number, n: number): Buffer {
  const out = Buffer.allocUnsafe(n);
  for (let i = 0; i < n; i++) out[i] = Math.floor(random() * 256);
  return out;
}

export class CrashableFiles implements JournalFiles {
  private readonly dirs = new Map<string, Dir>();
  private readonly fds = new Map<number, OpenFile>();
  /** Inodes locked (lock()), and the descriptor that holds each. */
  private readonly locks = new Map<Inode, number>();
  private steps = 0;
  private changes = 0;
  /** Syncs under way (their completion is a step of its own). */
  private syncsPending = 0;
  capacity: number;
  onStep: CrashableOptions['onStep'];
  /** A failing disk, or null. */
  faults: Faults | null = null;
  /** Operations failed by `faults`, by syscall. */
  readonly failed: Record<string, number> = {};
  private readonly mappableFs: boolean;
  private readonly mappings = new WeakMap<Uint8Array, Inode>();

  constructor(opts: CrashableOptions = {}) {
    this.onStep = opts.onStep;
    this.mappableFs = opts.mappable ?? false;
    this.capacity = opts.capacity ?? Infinity;
    this.dirs.set('/', new Dir()); // the root, durable
  }

  /** Operations so far that changed the disk or made something durable. */
  get stepCount(): number {
    return this.steps;
  }

  /** Whether an fdatasync or a directory fsync is under way. */
  get syncing(): boolean {
    return this.syncsPending > 0;
  }

  private step(what: string): void {
    this.steps++;
    this.onStep?.(this.steps, what);
  }

  /** Throws (or returns, for a callback) the error of a failing disk, drawn by `faults`. */
  private fault(syscall: string, path: string): Error | null {
    const f = this.faults;
    if (f === null || f.random() >= f.rate) return null;
    this.failed[syscall] = (this.failed[syscall] ?? 0) + 1;
    return fsError(f.random() < 0.7 ? 'EIO' : 'ENOSPC', syscall, path);
  }

  private failIfFaulty(syscall: string, path: string): void {
    const err = this.fault(syscall, path);
    if (err !== null) throw err;
  }

  private dirOf(path: string): { dir: Dir; name: string } {
    const { dir, name } = split(path);
    const d = this.dirs.get(dir);
    if (d === undefined) throw fsError('ENOENT', 'open', path);
    return { dir: d, name };
  }

  private file(fd: number, syscall: string): OpenFile {
    const f = this.fds.get(fd);
    if (f === undefined) throw fsError('EBADF', syscall, String(fd));
    return f;
  }

  private openFd(inode: Inode, path: string, mode: { append?: boolean; write: boolean }): number {
    let fd = 3;
    while (this.fds.has(fd)) fd++; // the lowest free number, as the kernel gives them
    this.fds.set(fd, { inode, path, append: mode.append ?? false, write: mode.write });
    return fd;
  }

  private dirChange(dir: Dir, change: DirChange): void {
    dir.pending.push({ change, fate: 'pending' });
  }

  private link(dir: Dir, name: string, inode: Inode): void {
    dir.current.set(name, inode);
    this.dirChange(dir, { kind: 'link', name, inode, n: ++this.changes });
  }

  /** The bytes every file any entry names holds now (what the disk's capacity counts). */
  usedBytes(): number {
    const seen = new Set<Inode>();
    for (const d of this.dirs.values()) for (const i of d.current.values()) seen.add(i);
    for (const f of this.fds.values()) seen.add(f.inode);
    let used = 0;
    for (const i of seen) used += i.data.byteLength;
    return used;
  }

  private change(inode: Inode, c: FileChange): void {
    const data = applyChange(inode.data, c);
    if (inode.mapped && data !== inode.data) throw new Error('crashable: a mapped file was resized: its mapping would no longer be the file');
    inode.data = data;
    inode.unsettled.push({ change: c, fate: 'pending' });
  }

  /** The process died: the kernel closes its descriptors, and with them its locks. Nothing of the disk changes. */
  processDied(): void {
    this.fds.clear();
    this.locks.clear();
  }

  // ---- JournalFiles ---------------------------------------------------------------------------

  makeDir(dir: string): string | undefined {
    if (this.dirs.has(dir)) return undefined;
    const parent = split(dir).dir;
    const first = this.makeDir(parent);
    this.failIfFaulty('mkdir', dir);
    const p = this.dirs.get(parent)!;
    const name = split(dir).name;
    this.dirs.set(dir, new Dir());
    p.subdirs.add(name);
    this.dirChange(p, { kind: 'mkdir', name, n: ++this.changes });
    this.step(`mkdir ${dir}`);
    return first ?? dir;
  }

  list(dir: string): string[] {
    const d = this.dirs.get(dir);
    if (d === undefined) throw fsError('ENOENT', 'scandir', dir);
    return [...d.current.keys(), ...d.subdirs];
  }

  create(path: string): number {
    const { dir, name } = this.dirOf(path);
    if (dir.current.has(name)) throw fsError('EEXIST', 'open', path);
    this.failIfFaulty('open', path);
    const inode = new Inode();
    this.link(dir, name, inode);
    const fd = this.openFd(inode, path, { write: true });
    this.step(`create ${name}`);
    return fd;
  }

  openWrite(path: string): number {
    const { dir, name } = this.dirOf(path);
    const inode = dir.current.get(name);
    if (inode === undefined) throw fsError('ENOENT', 'open', path);
    return this.openFd(inode, path, { write: true });
  }

  openAppend(path: string): number {
    const { dir, name } = this.dirOf(path);
    let inode = dir.current.get(name);
    if (inode === undefined) {
      this.failIfFaulty('open', path);
      inode = new Inode();
      this.link(dir, name, inode);
      const fd = this.openFd(inode, path, { write: true, append: true });
      this.step(`create ${name}`);
      return fd;
    }
    return this.openFd(inode, path, { write: true, append: true });
  }

  openRead(path: string): number {
    const { dir, name } = this.dirOf(path);
    const inode = dir.current.get(name);
    if (inode === undefined) throw fsError('ENOENT', 'open', path);
    return this.openFd(inode, path, { write: false });
  }

  close(fd: number): void {
    const f = this.file(fd, 'close');
    this.fds.delete(fd);
    if (this.locks.get(f.inode) === fd) this.locks.delete(f.inode);
  }

  lock(path: string): number | null {
    const { dir, name } = this.dirOf(path);
    let inode = dir.current.get(name);
    if (inode === undefined) {
      inode = new Inode();
      this.link(dir, name, inode);
      this.step(`create ${name}`);
    }
    const holder = this.locks.get(inode);
    if (holder !== undefined && this.fds.has(holder)) return null;
    const fd = this.openFd(inode, path, { write: true });
    this.locks.set(inode, fd);
    return fd;
  }

  writeAt(fd: number, parts: readonly Uint8Array[], position: number): number {
    const f = this.file(fd, 'writev');
    if (!f.write) throw fsError('EBADF', 'writev', f.path);
    const bytes = Buffer.concat(parts);
    return this.write(f, position, bytes, 'writev');
  }

  private write(f: OpenFile, at: number, bytes: Buffer, syscall: string): number {
    const err = this.fault(syscall, f.path);
    if (err !== null) {
      // A write the disk fails may have written a part of itself first.
      const part = Math.floor((this.faults!.random() * bytes.byteLength) / 512) * 512;
      if (part > 0 && (err as NodeJS.ErrnoException).code === 'EIO') {
        this.change(f.inode, { kind: 'write', at, bytes: Buffer.from(bytes.subarray(0, part)), n: ++this.changes });
        this.step(`${syscall} ${split(f.path).name} ${part} bytes at ${at}, then EIO`);
      }
      throw err;
    }
    const growth = Math.max(0, at + bytes.byteLength - f.inode.data.byteLength);
    const room = this.capacity - this.usedBytes();
    let n = bytes.byteLength;
    if (growth > room) {
      n = Math.max(0, f.inode.data.byteLength + room - at);
      if (n <= 0) throw fsError('ENOSPC', syscall, f.path);
    }
    this.change(f.inode, { kind: 'write', at, bytes: Buffer.from(bytes.subarray(0, n)), n: ++this.changes });
    this.step(`${syscall} ${split(f.path).name} ${n} bytes at ${at}`);
    return n;
  }

  append(fd: number, data: Uint8Array): number {
    const f = this.file(fd, 'write');
    if (!f.append) throw fsError('EBADF', 'write', f.path);
    return this.write(f, f.inode.data.byteLength, Buffer.from(data), 'write');
  }

  read(fd: number, into: Uint8Array, position: number): number {
    const f = this.file(fd, 'read');
    this.failIfFaulty('read', f.path);
    const n = Math.max(0, Math.min(into.byteLength, f.inode.data.byteLength - position));
    into.set(f.inode.data.subarray(position, position + n));
    return n;
  }

  readFile(path: string): Buffer {
    const { dir, name } = this.dirOf(path);
    const inode = dir.current.get(name);
    if (inode === undefined) throw fsError('ENOENT', 'open', path);
    this.failIfFaulty('read', path);
    return Buffer.from(inode.data);
  }

  size(fd: number): number {
    return this.file(fd, 'fstat').inode.data.byteLength;
  }

  truncate(fd: number, length: number): void {
    const f = this.file(fd, 'ftruncate');
    this.failIfFaulty('ftruncate', f.path);
    this.change(f.inode, { kind: 'truncate', size: length, n: ++this.changes });
    this.step(`truncate ${split(f.path).name} to ${length}`);
  }

  rename(from: string, to: string): void {
    const a = this.dirOf(from);
    const b = this.dirOf(to);
    if (a.dir !== b.dir) throw fsError('EXDEV', 'rename', from);
    const inode = a.dir.current.get(a.name);
    if (inode === undefined) throw fsError('ENOENT', 'rename', from);
    this.failIfFaulty('rename', from);
    a.dir.current.delete(a.name);
    a.dir.current.set(b.name, inode);
    this.dirChange(a.dir, { kind: 'rename', from: a.name, to: b.name, n: ++this.changes });
    this.step(`rename ${a.name} to ${b.name}`);
  }

  unlink(path: string): void {
    const { dir, name } = this.dirOf(path);
    if (!dir.current.has(name)) throw fsError('ENOENT', 'unlink', path);
    this.failIfFaulty('unlink', path);
    dir.current.delete(name);
    this.dirChange(dir, { kind: 'unlink', name, n: ++this.changes });
    this.step(`unlink ${name}`);
  }

  /** Settles the inode's changes up to `upTo` (or, `failed`, leaves them in limbo), then folds what is settled in order into durable. */
  private settleFile(inode: Inode, upTo: number, failed: boolean): void {
    for (const u of inode.unsettled) if (u.fate === 'pending' && u.change.n <= upTo) u.fate = failed ? 'limbo' : 'settled';
    while (inode.unsettled.length > 0 && inode.unsettled[0]!.fate === 'settled') inode.durable = applyChange(inode.durable, inode.unsettled.shift()!.change);
  }

  private settleDir(dir: Dir, upTo: number, failed: boolean): void {
    for (const p of dir.pending) if (p.fate === 'pending' && p.change.n <= upTo) p.fate = failed ? 'limbo' : 'settled';
    while (dir.pending.length > 0 && dir.pending[0]!.fate === 'settled') applyDirChange(dir.durable, dir.durableSubdirs, dir.pending.shift()!.change);
  }

  datasync(fd: number, done: SyncDone): void {
    const f = this.file(fd, 'fdatasync');
    const upTo = this.changes;
    const err = this.fault('fdatasync', f.path);
    this.syncsPending++;
    setImmediate(() => {
      this.syncsPending--;
      this.settleFile(f.inode, upTo, err !== null);
      this.step(`fdatasync ${split(f.path).name}${err === null ? '' : ' failed'}`);
      done(err);
    });
  }

  datasyncSync(fd: number): void {
    const f = this.file(fd, 'fdatasync');
    const err = this.fault('fdatasync', f.path);
    this.settleFile(f.inode, this.changes, err !== null);
    this.step(`fdatasync ${split(f.path).name}${err === null ? '' : ' failed'}`);
    if (err !== null) throw err;
  }

  syncDir(dir: string, done: SyncDone): void {
    const d = this.dirs.get(dir);
    if (d === undefined) return done(fsError('ENOENT', 'open', dir));
    const upTo = this.changes;
    const err = this.fault('fsync', dir);
    this.syncsPending++;
    setImmediate(() => {
      this.syncsPending--;
      this.settleDir(d, upTo, err !== null);
      this.step(`fsync of ${dir}${err === null ? '' : ' failed'}`);
      done(err);
    });
  }

  syncDirSync(dir: string): void {
    const d = this.dirs.get(dir);
    if (d === undefined) throw fsError('ENOENT', 'open', dir);
    const err = this.fault('fsync', dir);
    this.settleDir(d, this.changes, err !== null);
    this.step(`fsync of ${dir}${err === null ? '' : ' failed'}`);
    if (err !== null) throw err;
  }

  freeBytes(): number {
    return Math.min(Number.MAX_SAFE_INTEGER, this.capacity - this.usedBytes());
  }

  mappable(): string | null {
    return this.mappableFs ? 'crashable' : null;
  }

  map(fd: number, bytes: number): Uint8Array | null {
    const f = this.file(fd, 'mmap');
    if (!this.mappableFs) return null;
    if (bytes > f.inode.data.byteLength) {
      if (bytes - f.inode.data.byteLength > this.capacity - this.usedBytes()) return null;
      this.change(f.inode, { kind: 'allocate', size: bytes, n: ++this.changes });
      this.step(`fallocate ${split(f.path).name} ${bytes} bytes`);
    }
    f.inode.mapped = true;
    f.inode.mappedWrites = true;
    const view = new Uint8Array(f.inode.data.buffer, f.inode.data.byteOffset, bytes);
    this.mappings.set(view, f.inode);
    return view;
  }

  unmap(map: Uint8Array): void {
    // What was copied in stays the file's (a real unmap loses nothing either); the file may be resized again.
    const inode = this.mappings.get(map);
    if (inode !== undefined) inode.mapped = false;
    this.mappings.delete(map);
  }

  // ---- power cuts -----------------------------------------------------------------------------

  /**
   * The disk as a power cut now could leave it, as a new file system (nothing pending, nothing open,
   * no fault): what was not synced kept or lost as the model says, drawn with `random`.
   */
  cut(random: () => number, kind: CutKind = 'random'): CrashableFiles {
    const image = new CrashableFiles({ mappable: this.mappableFs });
    image.dirs.clear();
    const contents = new Map<Inode, Buffer>();
    const contentOf = (inode: Inode): Buffer => {
      let data = contents.get(inode);
      if (data === undefined) {
        data = kind === 'everything' ? Buffer.from(inode.data) : kind === 'nothing' ? syncedOf(inode) : drawFile(inode, random);
        contents.set(inode, data);
      }
      return data;
    };
    const kept = (fate: Fate) => fate === 'settled' || kind === 'everything' || (kind === 'random' && random() < 0.5);
    // Parents before children: a directory is there when its parent is and names it.
    for (const path of [...this.dirs.keys()].sort((a, b) => a.split('/').length - b.split('/').length)) {
      if (path !== '/' && !image.dirs.get(split(path).dir)?.subdirs.has(split(path).name)) continue;
      const dir = this.dirs.get(path)!;
      const entries = new Map(dir.durable);
      const subdirs = new Set(dir.durableSubdirs);
      for (const p of dir.pending) if (kept(p.fate)) applyDirChange(entries, subdirs, p.change);
      const out = new Dir();
      for (const [name, inode] of entries) out.current.set(name, new Inode(contentOf(inode)));
      out.durable = new Map(out.current);
      out.subdirs = subdirs;
      out.durableSubdirs = new Set(subdirs);
      image.dirs.set(path, out);
    }
    return image;
  }

  /** A file's bytes now (tests damage an image through these). */
  bytesOf(path: string): Buffer | undefined {
    const { dir, name } = split(path);
    return this.dirs.get(dir)?.current.get(name)?.data;
  }

  /** Replaces a file's bytes, as durable (a test's damage to an image); its directory must exist. */
  setBytes(path: string, bytes: Buffer): void {
    const { dir, name } = this.dirOf(path);
    const inode = new Inode(bytes);
    dir.current.set(name, inode);
    dir.durable.set(name, inode);
  }
}

function applyDirChange(entries: Map<string, Inode>, subdirs: Set<string>, c: DirChange): void {
  if (c.kind === 'link') entries.set(c.name, c.inode);
  else if (c.kind === 'unlink') entries.delete(c.name);
  else if (c.kind === 'mkdir') subdirs.add(c.name);
  else {
    const inode = entries.get(c.from);
    if (inode === undefined) return; // its source is not there: not done
    entries.delete(c.from);
    entries.set(c.to, inode);
  }
}

/** What a power cut keeps for sure: the durable bytes, and what was synced after a change left in limbo. */
function syncedOf(inode: Inode): Buffer {
  let data: Buffer = Buffer.from(inode.durable);
  for (const { change, fate } of inode.unsettled) if (fate === 'settled') data = applyChange(data, change);
  return data;
}

/**
 * A file's bytes after a power cut: its durable bytes, then each change not durable kept, lost or
 * torn (a settled one after a change in limbo: kept), a lost block coming back as it was or as
 * garbage; then the pages a mapping dirtied, each written back, lost, or garbage.
 */
function drawFile(inode: Inode, random: () => number): Buffer {
  let data: Buffer = Buffer.from(inode.durable);
  const lostBlock = (next: Buffer, from: number, to: number) => {
    if (random() < 0.3) next.set(garbage(random, to - from), from);
  };
  for (const { change: c, fate } of inode.unsettled) {
    if (fate === 'settled') {
      data = applyChange(data, c);
      continue;
    }
    const r = random();
    if (c.kind !== 'write') {
      if (r < 0.5) data = applyChange(data, c);
      continue;
    }
    const end = c.at + c.bytes.byteLength;
    const sizeKept = r >= 0.35 && (r < 0.7 || random() < 0.5); // whole, or torn with its size kept or not
    const next = sizeKept && end > data.byteLength ? resized(data, end) : data; // ours: written in place
    const to = Math.min(end, next.byteLength);
    if (r < 0.35) {
      if (to > c.at) lostBlock(next, c.at, to); // lost whole: as it was, or garbage
    } else if (r < 0.7) next.set(c.bytes.subarray(0, Math.max(0, to - c.at)), c.at);
    else {
      const block = random() < 0.5 ? 512 : 4096;
      for (let b = Math.floor(c.at / block) * block; b < end; b += block) {
        const from = Math.max(b, c.at);
        const upTo = Math.min(b + block, end, next.byteLength);
        if (upTo <= from) continue;
        if (random() < 0.5) lostBlock(next, from, upTo);
        else next.set(c.bytes.subarray(from - c.at, upTo - c.at), from);
      }
    }
    data = next;
  }
  if (inode.mappedWrites) {
    // The pages a mapping dirtied: where the file now differs from what its changes alone would make it.
    let written: Buffer = Buffer.from(inode.durable);
    for (const { change } of inode.unsettled) written = applyChange(written, change);
    const size = Math.min(data.byteLength, inode.data.byteLength, written.byteLength);
    for (let page = 0; page < size; page += PAGE) {
      const end = Math.min(page + PAGE, size);
      if (inode.data.subarray(page, end).equals(written.subarray(page, end))) continue;
      const r = random();
      if (r < 0.45) data.set(inode.data.subarray(page, end), page);
      else if (r < 0.6) data.set(garbage(random, end - page), page);
    }
  }
  return data;
}
