// The power-cut harness can fail: each test here breaks the journal in one way a durable store can be
// broken, in a copy of src/journal made for the test (production code has no switch for it), and
// shows the harness catching it. A mutation that no longer applies (the code it breaks changed) fails
// the test too, so that the harness is never left unchecked.
import { cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../../support/repo-root.js';
import type { makeDurableDir } from '../../../src/journal/slot-files.js';
import { runWorkload, type JournalClass } from '../../helpers/power-cut.js';

type MakeDir = typeof makeDurableDir;

interface Mutant {
  readonly name: string;
  readonly file: string;
  readonly from: string;
  readonly to: string;
}

const MUTANTS: readonly Mutant[] = [
  {
    name: 'a commit answered before its fdatasync',
    file: 'group-commit.ts',
    from: '    this.lastCommitAt = started;\n    const waiters = this.waiters;\n',
    to: '    this.lastCommitAt = started;\n    for (const w of this.waiters.splice(0)) w(null);\n    const waiters: CommitDone[] = [];\n',
  },
  {
    name: 'no directory fsync after a segment is created',
    file: 'journal.ts',
    from: '    this.active = segment;\n    this.commits?.dirChanged();\n',
    to: '    this.active = segment;\n',
  },
  {
    name: 'a mark written before its record is acknowledged',
    file: 'journal.ts',
    from: '    const { segment, index, at } = this.write(batch, timestamp);\n    this.openRecords++;',
    to: '    const { segment, index, at } = this.write(batch, timestamp);\n    segment.marks.push(index);\n    this.openRecords++;',
  },
  {
    name: "a spare's stale record read as current (the segment number not checked)",
    file: 'record.ts',
    from: '    if (h !== null && h.segment === seq && h.index >= due) {',
    to: '    if (h !== null && h.index >= due) {',
  },
  {
    name: 'a damaged header ends the reading of its segment (no resynchronisation)',
    file: 'record.ts',
    from: '    if (byFirstHalf < 0 && bySecondHalf < 0) break;',
    to: '    break;',
  },
  {
    name: "a failed fdatasync forgotten: the next commit's sync answers its requests (fsyncgate)",
    file: 'group-commit.ts',
    from: '      if (err !== null && failure === null) failure = syncError(err, what);',
    to: "      if (err !== null && failure === null && what === '') failure = syncError(err, what);",
  },
  {
    name: "the journal directory's entry not made durable (no fsync of its parent)",
    file: 'slot-files.ts',
    from: '  for (const level of levels.reverse()) files.syncDirSync(dirname(level));',
    to: '  void levels;',
  },
];

const WORK = join(REPO_ROOT, '.run', 'mutants');
afterAll(() => rmSync(WORK, { recursive: true, force: true }));

/** src/journal copied with one mutation applied; its Journal class, and how it makes its directory. */
async function mutantJournal(m: Mutant, slug: string): Promise<{ Journal: JournalClass; makeDurableDir: MakeDir }> {
  const dir = join(WORK, slug, 'journal');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  cpSync(join(REPO_ROOT, 'src', 'journal'), dir, { recursive: true });
  const path = join(dir, m.file);
  const source = readFileSync(path, 'utf8');
  expect(source.split(m.from).length - 1, `the code "${m.name}" breaks is in src/journal/${m.file} once`).toBe(1);
  writeFileSync(path, source.replace(m.from, m.to));
  const { Journal } = (await import(pathToFileURL(join(dir, 'journal.ts')).href)) as { Journal: JournalClass };
  const { makeDurableDir } = (await import(pathToFileURL(join(dir, 'slot-files.ts')).href)) as { makeDurableDir: MakeDir };
  return { Journal, makeDurableDir };
}

describe('the power-cut harness catches', () => {
  it.each(MUTANTS.map((m, i) => ({ ...m, slug: `m${i}` })))('$name', { timeout: 300_000 }, async (m) => {
    const { Journal, makeDurableDir } = await mutantJournal(m, m.slug);
    let caught: string | null = null;
    for (let seed = 1; seed <= 60 && caught === null; seed++) {
      caught = (await runWorkload({ Journal, makeDurableDir, seed, sync: 'disk', actions: 250, draws: 3 })).violation;
    }
    console.log(`${m.name}: ${caught}`);
    expect(caught).not.toBeNull();
  });
});
