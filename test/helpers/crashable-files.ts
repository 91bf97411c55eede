// A file system in memory that can lose power: the test double of the journal's file interface
// (src/journal/files.ts). It keeps, per file, what is durable and what was only written, and per
// directory which entries are durable; cut() draws the disk a power cut at that moment could leave.
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
//   - The size the write gave the file is kept or lost apart from its data: a size kept over data
//     lost reads as zeros (XFS's "NULL files" after a crash; space allocated but never written reads
//     as zeros on ext4 and XFS alike: unwritten extents). Data kept past a size lost is cut off.
//   - truncate and fallocate are kept or lost the same way, in the order they came with the writes.
// Directory entries. creat, rename and unlink change the directory, which is durable only after
// fsync(2) of the directory itself: "Calling fsync() does not necessarily ensure that the entry in
// the directory containing the file has also reached disk. For that an explicit fsync() on a file
// descriptor for the directory is also needed" (Linux fsync(2)). Until then each such change is,
// independently, done or not at a power cut (in order, where it still applies: a rename whose
// source is not there is not done). A file that no entry names after the cut is gone.
//
// Where it is stricter than a real disk: ext4 and XFS journal their metadata in order, so a rename
// survives only with every directory change before it, and both commit on their own every few
// seconds (ext4's commit=5, XFS's log); ext4 in data=ordered mode writes a file's new blocks before
// the size that covers them, and since Linux 2.6.30 flushes a file replaced by rename or truncate
// (auto_da_alloc). Here any subset of what was not synced survives and nothing is synced but by the
// calls: whatever holds here holds there. Where it is looser: it trusts fsync, so a disk whose cache
// loses acknowledged writes (no flush, no FUA) is not modelled, nor is bit rot (the records' CRC is
// there for that, and the tests damage records on purpose too).
//
// Mappings (process mode): map() returns the file's own memory. What is copied into it is in the
// page cache, like a write, but no sync covers it in process mode: a power cut that keeps nothing
// unsynced loses it, and a crash of the process alone (cut({ keep: 'everything' })) keeps it.
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
  | { kind: 'write'; at: number; bytes: Buffer; n: number }
  | { kind: 'truncate'; size: number; n: number }
  | { kind: 'allocate'; size: number; n: number };

class Inode {
  /** What reading the file gives now. */
  data: Buffer;
  /** What a power cut keeps for sure. */
  durable: Buffer;
  /** Changes since the last sync, oldest first. */
  pending: FileChange[] = [];
  /** A mapping hands out `data` itself: it must not be reallocated meanwhile. */
  mapped = false;
  constructor(data: Buffer = Buffer.alloc(0)) {
    this.data = data;
    this.durable = Buffer.from(data); // never the same memory: `data` is written in place
  }
}

type DirChange =
  | { kind: 'link'; name: string; inode: Inode; n: number }
  | { kind: 'unlink'; name: string; n: number }
  | { kind: 'rename'; from: string; to: string; n: number };

class Dir {
  current = new Map<string, Inode>();
  durable = new Map<string, Inode>();
  pending: DirChange[] = [];
}

interface OpenFile {
  readonly inode: Inode;
  readonly path: string;
  readonly append: boolean;
  readonly write: boolean;
}

/** How a power cut treats what was not synced: drawn at random, or all of it kept (a crash of the process alone), or none. */
export type CutKind = 'random' | 'everything' | 'nothing';

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

export class CrashableFiles implements JournalFiles {
  private readonly dirs = new Map<string, Dir>();
  private readonly fds = new Map<number, OpenFile>();
  private steps = 0;
  private changes = 0;
  /** Syncs under way (their completion is a step of its own). */
  private syncsPending = 0;
  capacity: number;
  onStep: CrashableOptions['onStep'];
  private readonly mappableFs: boolean;
  private readonly mappings = new WeakMap<Uint8Array, Inode>();

  constructor(opts: CrashableOptions = {}) {
    this.onStep = opts.onStep;
    this.mappableFs = opts.mappable ?? false;
    this.capacity = opts.capacity ?? Infinity;
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

  private link(dir: Dir, name: string, inode: Inode): void {
    dir.current.set(name, inode);
    dir.pending.push({ kind: 'link', name, inode, n: ++this.changes });
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
    inode.pending.push(c);
  }

  // ---- JournalFiles ---------------------------------------------------------------------------

  makeDir(dir: string): void {
    if (!this.dirs.has(dir)) this.dirs.set(dir, new Dir()); // the journal's directory itself is taken as durable
  }

  list(dir: string): string[] {
    const d = this.dirs.get(dir);
    if (d === undefined) throw fsError('ENOENT', 'scandir', dir);
    return [...d.current.keys()];
  }

  create(path: string): number {
    const { dir, name } = this.dirOf(path);
    if (dir.current.has(name)) throw fsError('EEXIST', 'open', path);
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
    this.file(fd, 'close');
    this.fds.delete(fd);
  }

  writeAt(fd: number, parts: readonly Uint8Array[], position: number): number {
    const f = this.file(fd, 'writev');
    if (!f.write) throw fsError('EBADF', 'writev', f.path);
    const bytes = Buffer.concat(parts);
    return this.write(f, position, bytes, 'writev');
  }

  private write(f: OpenFile, at: number, bytes: Buffer, syscall: string): number {
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
    const n = Math.max(0, Math.min(into.byteLength, f.inode.data.byteLength - position));
    into.set(f.inode.data.subarray(position, position + n));
    return n;
  }

  readFile(path: string): Buffer {
    const { dir, name } = this.dirOf(path);
    const inode = dir.current.get(name);
    if (inode === undefined) throw fsError('ENOENT', 'open', path);
    return Buffer.from(inode.data);
  }

  size(fd: number): number {
    return this.file(fd, 'fstat').inode.data.byteLength;
  }

  truncate(fd: number, length: number): void {
    const f = this.file(fd, 'ftruncate');
    this.change(f.inode, { kind: 'truncate', size: length, n: ++this.changes });
    this.step(`truncate ${split(f.path).name} to ${length}`);
  }

  rename(from: string, to: string): void {
    const a = this.dirOf(from);
    const b = this.dirOf(to);
    if (a.dir !== b.dir) throw fsError('EXDEV', 'rename', from);
    const inode = a.dir.current.get(a.name);
    if (inode === undefined) throw fsError('ENOENT', 'rename', from);
    a.dir.current.delete(a.name);
    a.dir.current.set(b.name, inode);
    a.dir.pending.push({ kind: 'rename', from: a.name, to: b.name, n: ++this.changes });
    this.step(`rename ${a.name} to ${b.name}`);
  }

  unlink(path: string): void {
    const { dir, name } = this.dirOf(path);
    if (!dir.current.delete(name)) throw fsError('ENOENT', 'unlink', path);
    dir.pending.push({ kind: 'unlink', name, n: ++this.changes });
    this.step(`unlink ${name}`);
  }

  /** Makes the inode's changes up to `upTo` durable. */
  private settleFile(inode: Inode, upTo: number): void {
    while (inode.pending.length > 0 && inode.pending[0]!.n <= upTo) inode.durable = applyChange(inode.durable, inode.pending.shift()!);
  }

  private settleDir(dir: Dir, upTo: number): void {
    while (dir.pending.length > 0 && dir.pending[0]!.n <= upTo) applyDirChange(dir.durable, dir.pending.shift()!);
  }

  datasync(fd: number, done: SyncDone): void {
    const f = this.file(fd, 'fdatasync');
    const upTo = this.changes;
    this.syncsPending++;
    setImmediate(() => {
      this.syncsPending--;
      this.settleFile(f.inode, upTo);
      this.step(`fdatasync ${split(f.path).name}`);
      done(null);
    });
  }

  datasyncSync(fd: number): void {
    const f = this.file(fd, 'fdatasync');
    this.settleFile(f.inode, this.changes);
    this.step(`fdatasync ${split(f.path).name}`);
  }

  syncDir(dir: string, done: SyncDone): void {
    const d = this.dirs.get(dir);
    if (d === undefined) return done(fsError('ENOENT', 'open', dir));
    const upTo = this.changes;
    this.syncsPending++;
    setImmediate(() => {
      this.syncsPending--;
      this.settleDir(d, upTo);
      this.step('fsync of the directory');
      done(null);
    });
  }

  syncDirSync(dir: string): void {
    const d = this.dirs.get(dir);
    if (d === undefined) throw fsError('ENOENT', 'open', dir);
    this.settleDir(d, this.changes);
    this.step('fsync of the directory');
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
   * The disk as a power cut now could leave it, as a new file system (nothing pending, nothing open):
   * what was not synced kept or lost as the model says, drawn with `random`.
   */
  cut(random: () => number, kind: CutKind = 'random'): CrashableFiles {
    const image = new CrashableFiles({ mappable: this.mappableFs });
    const contents = new Map<Inode, Buffer>();
    const contentOf = (inode: Inode): Buffer => {
      let data = contents.get(inode);
      if (data === undefined) {
        data = kind === 'everything' ? Buffer.from(inode.data) : kind === 'nothing' ? Buffer.from(inode.durable) : drawFile(inode, random);
        contents.set(inode, data);
      }
      return data;
    };
    for (const [path, dir] of this.dirs) {
      const entries = new Map(dir.durable);
      for (const c of dir.pending) {
        if (kind === 'nothing' || (kind === 'random' && random() < 0.5)) continue;
        applyDirChange(entries, c);
      }
      const out = new Dir();
      for (const [name, inode] of entries) out.current.set(name, new Inode(contentOf(inode)));
      out.durable = new Map(out.current);
      image.dirs.set(path, out);
    }
    return image;
  }

  /** A file's bytes now (tests damage an image through these). */
  bytesOf(path: string): Buffer | undefined {
    const { dir, name } = split(path);
    return this.dirs.get(dir)?.current.get(name)?.data;
  }

  /** Replaces a file's bytes, as durable (a test's damage to an image). */
  setBytes(path: string, bytes: Buffer): void {
    const { dir, name } = this.dirOf(path);
    const inode = new Inode(bytes);
    dir.current.set(name, inode);
    dir.durable.set(name, inode);
  }
}

function applyDirChange(entries: Map<string, Inode>, c: DirChange): void {
  if (c.kind === 'link') entries.set(c.name, c.inode);
  else if (c.kind === 'unlink') entries.delete(c.name);
  else {
    const inode = entries.get(c.from);
    if (inode === undefined) return; // its source is not there: not done
    entries.delete(c.from);
    entries.set(c.to, inode);
  }
}

/** A file's bytes after a power cut: its durable bytes, then each pending change kept, lost or torn. */
function drawFile(inode: Inode, random: () => number): Buffer {
  let data: Buffer = Buffer.from(inode.durable);
  for (const c of inode.pending) {
    const r = random();
    if (c.kind !== 'write') {
      if (r < 0.5) data = applyChange(data, c);
      continue;
    }
    if (r < 0.35) continue; // lost whole
    const end = c.at + c.bytes.byteLength;
    const sizeKept = r < 0.7 || random() < 0.5; // whole, or torn with its size kept or not
    const next = sizeKept && end > data.byteLength ? resized(data, end) : data; // ours: written in place
    if (r < 0.7) next.set(c.bytes.subarray(0, Math.max(0, Math.min(c.bytes.byteLength, next.byteLength - c.at))), c.at);
    else {
      const block = random() < 0.5 ? 512 : 4096;
      for (let b = Math.floor(c.at / block) * block; b < end; b += block) {
        if (random() < 0.5) continue;
        const from = Math.max(b, c.at);
        const to = Math.min(b + block, end, next.byteLength);
        if (to > from) next.set(c.bytes.subarray(from - c.at, to - c.at), from);
      }
    }
    data = next;
  }
  return data;
}
