// One process per journal slot, enforced, as Kafka locks each log directory (`.lock`) and PostgreSQL
// refuses a data directory whose postmaster.pid is live. Two processes writing one slot would number
// segments alike and mark each other's records done: the journal's promises hold only for one writer.
//
//   primary: service.lock      held for the service's life: a second service given the same JOURNAL_DIR
//                              (a second `make run`, pods on a shared volume) stops at once (lockJournalDir)
//   worker:  slot-<n>.lock     taken before the worker touches the slot's files, held until it exits
//                              (claimSlots); a standby takes a dead worker's slot by taking its lock,
//                              which the kernel released when the worker died
//   drain:   service.lock and every slot-<n>.lock with files, without waiting (claimEverySlot): a
//                              directory in use is left alone
//
// The locks are flock(2) locks (files.ts), which belong to the descriptor: the kernel releases them
// when the holder exits or dies, however it dies, so no stale lock outlives its process. Each lock
// file holds a line naming its holder, for the message of whoever finds it held.
//
// A slot whose lock is held while the service lock is free belongs to a worker of an earlier service
// that outlived its primary: Node's cluster ends a worker as soon as it sees its primary gone, but a
// worker stopped or busy at that moment holds its slot until it sees it. The new worker of that slot
// waits for it, up to SHUTDOWN_TIMEOUT_MS and a margin, then stops with JOURNAL_IN_USE.
import { join } from 'node:path';
import type { JournalFiles } from './files.js';
import { makeDurableDir, slotsWithFiles } from './slot-files.js';

export const SERVICE_LOCK = 'service.lock';

export const slotLockPath = (dir: string, slot: number): string => join(dir, `slot-${slot}.lock`);

/** A journal directory, or a slot of it, that another process holds. The message names the directory, the lock and its holder. */
export class JournalInUse extends Error {
  constructor(
    readonly dir: string,
    readonly lockPath: string,
    readonly holder: string,
    what: string,
  ) {
    super(`${what}: ${holder} holds ${lockPath}`);
    this.name = 'JournalInUse';
  }
}

/** A lock held: released when the process ends, or by release(). */
export interface HeldLock {
  release(): void;
}

/** The slots a worker holds: its own, and (slot 0) those of slots that no longer exist. */
export interface SlotClaim extends HeldLock {
  readonly slot: number;
  readonly slots: ReadonlySet<number>;
}

/**
 * The service's hold on JOURNAL_DIR (the primary's, for its life): creates the directory, durably, if
 * missing. Throws JournalInUse when another service holds it.
 */
export function lockJournalDir(files: JournalFiles, dir: string): HeldLock {
  makeDurableDir(files, dir);
  const path = join(dir, SERVICE_LOCK);
  const fd = tryLock(files, path);
  if (fd === null) {
    throw new JournalInUse(
      dir,
      path,
      holderOf(files, path),
      `the journal directory ${dir} (JOURNAL_DIR) is in use by another service; give each instance a directory of its own`,
    );
  }
  return heldLock(files, fd);
}

export interface ClaimOptions {
  files: JournalFiles;
  dir: string;
  slot: number;
  /** WORKERS: slot 0 also claims the slots at or above it that have files and no holder. */
  slotsInUse: number;
  /** How long to wait for the slot's lock while another process holds it (0: not at all). */
  waitMs: number;
  /** Called once when the slot is found held and the claim waits, with the holder. */
  onWait?: (holder: string, lockPath: string) => void;
  /** Called for each slot that no longer exists that slot 0 leaves, since another process holds it. */
  onSkip?: (slot: number, holder: string) => void;
}

/**
 * Takes slot `slot`'s lock, waiting up to waitMs while another process holds it (polling, since a
 * blocking flock would hold up the event loop), then, for slot 0, the locks of the slots at or above
 * WORKERS that have files and that no process holds. Throws JournalInUse when the slot is still held.
 */
export async function claimSlots(opts: ClaimOptions): Promise<SlotClaim> {
  const path = slotLockPath(opts.dir, opts.slot);
  const deadline = Date.now() + opts.waitMs;
  let fd = tryLock(opts.files, path);
  if (fd === null) opts.onWait?.(holderOf(opts.files, path), path);
  while (fd === null && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    fd = tryLock(opts.files, path);
  }
  if (fd === null)
    throw new JournalInUse(
      opts.dir,
      path,
      holderOf(opts.files, path),
      `journal slot ${opts.slot} of ${opts.dir} (JOURNAL_DIR) is still in use after ${opts.waitMs} ms`,
    );
  return claimOthers(opts, fd);
}

/** claimSlots without waiting: throws JournalInUse at once when the slot is held (tests, benchmarks). */
export function claimSlotsNow(opts: Omit<ClaimOptions, 'waitMs' | 'onWait'>): SlotClaim {
  const path = slotLockPath(opts.dir, opts.slot);
  const fd = tryLock(opts.files, path);
  if (fd === null) throw new JournalInUse(opts.dir, path, holderOf(opts.files, path), `journal slot ${opts.slot} of ${opts.dir} (JOURNAL_DIR) is in use`);
  return claimOthers(opts, fd);
}

/**
 * Every slot of the directory that has files, whatever WORKERS wrote them (`drain`): their locks taken
 * without waiting. Throws JournalInUse, naming the holder, at the first one another process holds,
 * having released those it took. The claim's own slot is the lowest (0 when none has files).
 */
export function claimEverySlot(files: JournalFiles, dir: string): SlotClaim {
  const slots = [...slotsWithFiles(files.list(dir))].sort((a, b) => a - b);
  const fds: number[] = [];
  for (const slot of slots) {
    const path = slotLockPath(dir, slot);
    const fd = tryLock(files, path);
    if (fd === null) {
      heldLock(files, ...fds).release();
      throw new JournalInUse(dir, path, holderOf(files, path), `journal slot ${slot} of ${dir} (JOURNAL_DIR) is in use`);
    }
    fds.push(fd);
  }
  const { release } = heldLock(files, ...fds);
  return { slot: slots[0] ?? 0, slots: new Set(slots), release };
}

function claimOthers(opts: Omit<ClaimOptions, 'waitMs' | 'onWait'>, fd: number): SlotClaim {
  const fds = [fd];
  const slots = new Set([opts.slot]);
  if (opts.slot === 0) {
    for (const other of slotsWithFiles(opts.files.list(opts.dir))) {
      if (other < opts.slotsInUse) continue;
      const path = slotLockPath(opts.dir, other);
      const held = tryLock(opts.files, path);
      if (held === null) opts.onSkip?.(other, holderOf(opts.files, path));
      else {
        fds.push(held);
        slots.add(other);
      }
    }
  }
  const { release: releaseAll } = heldLock(opts.files, ...fds);
  return { slot: opts.slot, slots, release: releaseAll };
}

/** The lock of `path` taken, with a line naming this process written into it; null when another holds it. */
function tryLock(files: JournalFiles, path: string): number | null {
  const fd = files.lock(path);
  if (fd === null) return null;
  const line = Buffer.from(`process ${process.pid} (${process.title}) since ${new Date().toISOString()}\n`);
  try {
    files.truncate(fd, 0);
    files.writeAt(fd, [line], 0);
  } catch {
    /* the lock holds without its line: whoever finds it held reads "a process" */
  }
  return fd;
}

/** Who holds the lock of `path`, as its line says. */
function holderOf(files: JournalFiles, path: string): string {
  try {
    const line = files.readFile(path).toString('utf8').trim();
    if (line !== '') return line.split(' since ')[0]!;
  } catch {
    /* unreadable: said below */
  }
  return 'a process';
}

function heldLock(files: JournalFiles, ...fds: number[]): HeldLock {
  let released = false;
  return {
    release: () => {
      if (released) return;
      released = true;
      for (const fd of fds) files.close(fd);
    },
  };
}
