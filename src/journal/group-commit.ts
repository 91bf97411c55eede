// JOURNAL_SYNC=disk: the group commit. A request's 202 waits until its journal record is on the disk;
// one fdatasync (from the threadpool, not the event loop) serves every request that came meanwhile.
//
//   written(fd) ─▶ unsynced ─commit─▶ syncing ─fdatasync done─▶ waiters answered
//   afterCommit(done) ─▶ waiters of the next commit: at once after a quiet spell, else no sooner than
//                        JOURNAL_SYNC_INTERVAL_MS after the last one started
//
// The interval is there because each fdatasync costs a threadpool round trip and a commit of the file
// system's own journal: at thousands of requests a second, one as soon as the last ended served only a
// request or two.
//
// A file the journal is done with while it still has records to sync, or while a sync of it is under
// way, is closed after that sync: closed before, the sync fails (EBADF: a 500 for requests whose points
// were taken) or syncs whatever file took its number.
//
// A sync that fails fails the group commit for good: its requests and every one after are answered
// with the failure, and no sync is tried again. After PostgreSQL's "fsyncgate" (2018): once fsync has
// reported a failed writeback, Linux may have dropped the pages that failed and marked them clean, so
// a later fsync can succeed without them ever reaching the disk. The journal is then failed, and the
// worker is restarted to recover from what the disk holds (docs/reliability.md, "A disk that fails").
import { diskFiles, type JournalFiles } from './files.js';
import { JournalError } from './journal-error.js';

export type CommitDone = (err: Error | null) => void;

export class GroupCommit {
  private waiters: CommitDone[] = [];
  private committing = false;
  private lastCommitAt = -Infinity;
  /** A commit waiting for its turn (the interval, or the next turn of the loop): none starts meanwhile. */
  private cancelScheduled: (() => void) | null = null;
  /** Files with records written since their last sync, and those of the sync under way. */
  private readonly unsynced = new Set<number>();
  private readonly syncing = new Set<number>();
  private readonly closeAfterSync = new Set<number>();
  private dirUnsynced = false;
  /** A directory fsync is under way (its commit's requests wait for it). */
  private dirSyncing = false;
  /** Set by close(): the outcome of its sync. */
  private closed: { failure: Error | null } | null = null;
  /** The first sync that failed: every commit since is answered with it. */
  private failure: JournalError | null = null;

  /**
   * `dir`: the journal's directory, synced when a file in it was created, renamed or deleted.
   * `onFailure`: called once, when a sync fails.
   */
  constructor(
    private readonly dir: string,
    private readonly intervalMs: number,
    private readonly onCommit: (seconds: number) => void = () => undefined,
    private readonly files: JournalFiles = diskFiles,
    private readonly onFailure: (err: JournalError) => void = () => undefined,
  ) {}

  /** A record was written into this file: the next commit syncs it. */
  written(fd: number): void {
    this.unsynced.add(fd);
  }

  /** A file in the directory was created, renamed or deleted: the next commit syncs the directory. */
  dirChanged(): void {
    this.dirUnsynced = true;
  }

  /** The journal is done with this file: closed now, or after the sync that still has to cover it. */
  closeFile(fd: number): void {
    if (this.unsynced.has(fd) || this.syncing.has(fd)) this.closeAfterSync.add(fd);
    else this.files.close(fd);
  }

  /** Calls `done` once every record written so far is on the disk (and the directory entries that name their files). */
  afterCommit(done: CommitDone): void {
    if (this.failure !== null) return done(this.failure);
    if (this.closed !== null) return done(new JournalError('the journal is closed: the worker is stopping'));
    this.waiters.push(done);
    if (!this.committing && this.cancelScheduled === null) this.schedule(false);
  }

  /** The next commit: now (after one, on the next turn of the loop), or once the interval since the last has passed. */
  private schedule(afterOne: boolean): void {
    const wait = this.lastCommitAt + this.intervalMs - performance.now();
    if (wait <= 0 && !afterOne) return this.commitNow();
    const run = () => {
      this.cancelScheduled = null;
      this.commitNow();
    };
    if (wait > 0) {
      const timer = setTimeout(run, wait);
      this.cancelScheduled = () => clearTimeout(timer);
    } else {
      const immediate = setImmediate(run);
      this.cancelScheduled = () => clearImmediate(immediate);
    }
  }

  private commitNow(): void {
    const started = performance.now();
    this.lastCommitAt = started;
    const waiters = this.waiters;
    this.waiters = [];
    const fds = [...this.unsynced];
    this.unsynced.clear();
    for (const fd of fds) this.syncing.add(fd);
    const syncDir = this.dirUnsynced;
    this.dirUnsynced = false;
    this.dirSyncing = syncDir;
    this.committing = true;
    let pending = fds.length + (syncDir ? 1 : 0);
    let failure: JournalError | null = null;
    const finish = () => {
      this.committing = false;
      this.syncing.clear();
      this.dirSyncing = false;
      if (fds.length > 0 || syncDir) this.onCommit((performance.now() - started) / 1000);
      // Closed meanwhile: close() synced and closed the files (their numbers may be another file's now).
      if (this.closed !== null) return waiters.forEach((w) => w(this.closed!.failure));
      for (const fd of fds) {
        // Written again during this sync, it waits for the next commit, which closes it after its own.
        if (this.unsynced.has(fd) || !this.closeAfterSync.delete(fd)) continue;
        try {
          this.files.close(fd);
        } catch {
          /* closed on a failed write already */
        }
      }
      if (failure !== null && this.failure === null) {
        this.failure = failure;
        this.onFailure(failure);
      }
      for (const w of waiters) w(failure);
      if (this.failure !== null) for (const w of this.waiters.splice(0)) w(this.failure);
      else if (this.waiters.length > 0) this.schedule(true);
    };
    const one = (what: string) => (err: Error | null) => {
      if (err !== null && failure === null) failure = syncError(err, what);
      if (--pending === 0) finish();
    };
    if (pending === 0) return finish();
    for (const fd of fds) this.files.datasync(fd, one('fdatasync of a segment'));
    if (syncDir) this.files.syncDir(this.dir, one('fsync of the directory'));
  }

  /**
   * Before the journal closes its files: every file with records not yet on the disk synced here, on
   * the loop, and every request waiting for a commit (held back by the interval, or under way)
   * answered with that outcome; the files closed after their sync are closed.
   */
  close(): void {
    this.cancelScheduled?.();
    this.cancelScheduled = null;
    const waiters = this.waiters;
    this.waiters = [];
    let failure: Error | null = this.failure;
    try {
      // Failed once, never synced again: a sync now could succeed over pages the kernel dropped.
      if (failure !== null) throw failure;
      for (const fd of new Set([...this.unsynced, ...this.syncing])) this.files.datasyncSync(fd);
      // The directory too when a sync of it is under way: its requests are answered here, and its
      // fsync may not have reached the disk yet (found by the power-cut test, seed 8: a segment's
      // directory entry lost after its records were answered 202).
      if (this.dirUnsynced || this.dirSyncing) this.files.syncDirSync(this.dir);
      this.unsynced.clear();
      this.dirUnsynced = false;
    } catch (err) {
      failure = err === this.failure ? this.failure : syncError(err as Error, 'sync of the journal at close');
    }
    this.closed = { failure };
    for (const w of waiters) w(failure);
    for (const fd of this.closeAfterSync) this.files.close(fd);
    this.closeAfterSync.clear();
  }
}

function syncError(err: Error, what: string): JournalError {
  return new JournalError(`cannot sync the journal to disk (${what}): ${err.message}`, { cause: err });
}
