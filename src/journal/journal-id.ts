// The journal directory's identity: a random name written once, when the directory is first used
// with DELIVERY=exactly-once. A slot's committed position (write-ahead/transactions.ts) names the
// journal it counts in. Segment numbers never go back within one directory (slot-files.ts), but a
// new directory (a fresh volume, JOURNAL_DIR changed) starts again at 0: a position of the old one
// read against it would mark new records done that Kafka never had.
//
// The primary creates it, holding the directory's lock (process/supervisor.ts), before it forks: two
// workers creating it at once would each publish their own id, and the one that lost would count
// its positions in a journal the directory no longer names. Workers only read it back.
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import type { JournalFiles } from './files.js';
import { JournalError } from './journal-error.js';

const ID_FILE = 'journal.id';
const INSTANCE_FILE = 'journal.instance';
const ID_RE = /^[0-9a-f-]{36}$/;

/** The directory's identity, created (durably: written, synced, renamed into place, directory synced) if it has none. */
export function journalIdentity(files: JournalFiles, dir: string): string {
  const existing = readLine(files, join(dir, ID_FILE));
  if (existing !== null && ID_RE.test(existing)) return existing;
  const id = randomUUID();
  writeLine(files, dir, ID_FILE, id);
  return id;
}

/**
 * The instance whose slots' transactional ids (and committed positions) the directory's records are
 * counted under: recorded at each start, so that `drain`, run elsewhere under another name (a Job's
 * pod), produces them under the same ids and nothing committed is produced twice.
 */
export function recordInstance(files: JournalFiles, dir: string, instance: string): void {
  if (readLine(files, join(dir, INSTANCE_FILE)) !== instance) writeLine(files, dir, INSTANCE_FILE, instance);
}

/** The instance recorded by the last start (recordInstance), or null when none was. */
export function recordedInstance(files: JournalFiles, dir: string): string | null {
  return readLine(files, join(dir, INSTANCE_FILE));
}

function readLine(files: JournalFiles, path: string): string | null {
  try {
    const line = files.readFile(path).toString('utf8').trim();
    return line === '' ? null : line;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new JournalError(`cannot read ${path}: ${(err as Error).message}`, { cause: err });
  }
}

/** One line, durably: written, synced, renamed into place, directory synced. */
function writeLine(files: JournalFiles, dir: string, name: string, line: string): void {
  const path = join(dir, name);
  const tmp = `${path}.${process.pid}.tmp`;
  try {
    try {
      files.unlink(tmp);
    } catch {
      // none left by an earlier try
    }
    const fd = files.create(tmp);
    try {
      files.append(fd, Buffer.from(`${line}\n`));
      files.datasyncSync(fd);
    } finally {
      files.close(fd);
    }
    files.rename(tmp, path);
    files.syncDirSync(dir);
  } catch (err) {
    throw new JournalError(`cannot write ${path}: ${(err as Error).message}`, { cause: err });
  }
}
