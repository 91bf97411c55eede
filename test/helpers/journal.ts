// A journal opened as a worker opens one: its directory made, its slot claimed (journal/slot-lock.ts),
// then the journal. Opening a journal again on a directory plays the next generation of processes
// after a crash: those before are gone, and their locks with them (what the kernel does when a
// process dies), unless `alongside` says they still run.
import { diskFiles, type JournalFiles } from '../../src/journal/files.js';
import { Journal, type JournalOptions } from '../../src/journal/journal.js';
import { makeDurableDir } from '../../src/journal/slot-files.js';
import { claimSlotsNow, type SlotClaim } from '../../src/journal/slot-lock.js';

export type OpenOptions = Omit<JournalOptions, 'claim'> & {
  /** The worker's slot (0), and WORKERS (1): slot 0 takes the files of slots at or above it. */
  slot?: number;
  slots?: number;
  /** The journals opened on this directory before still run (their locks held). */
  alongside?: boolean;
};

const held = new Map<string, SlotClaim[]>();

export function openJournal({ slot = 0, slots = 1, alongside = false, ...opts }: OpenOptions): { journal: Journal; claim: SlotClaim } {
  const files: JournalFiles = opts.files ?? diskFiles;
  makeDurableDir(files, opts.dir);
  const before = held.get(opts.dir) ?? [];
  if (!alongside) for (const c of before.splice(0)) c.release();
  const claim = claimSlotsNow({ files, dir: opts.dir, slot, slotsInUse: slots });
  held.set(opts.dir, [...before, claim]);
  return { journal: new Journal({ ...opts, claim }), claim };
}
