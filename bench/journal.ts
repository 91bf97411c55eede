// `make bench-journal`: the write-ahead journal's own CPU per point, alone in this process, in requests of
// 100 and of 1 point, in both JOURNAL_SYNC modes: append (a record written, mapped or with pwritev
// through src/journal/files.ts), acknowledged (the record done), and the marks written every 10
// records, as the producer's poll does. No group commit: its fdatasync runs on the threadpool, not on
// the event loop's CPU, and no broker. The service's CPU per point moves by several per cent from one
// run of `make bench-cpu` to the next on a shared 2-core machine; this isolates what a change to the
// journal costs, to about a per cent.
//
// JOURNAL_COMPARE=path/to/other/dist/src/journal/journal.js[,...] runs other builds of the journal side
// by side, alternating with this one in each round (an earlier commit's `npx tsc -p tsconfig.build.json`).
// JOURNAL_ROUNDS (5), JOURNAL_RECORDS_1 (200000) and JOURNAL_RECORDS_100 (20000) records per row.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { diskFiles } from '../src/journal/files.js';
import type { Journal as JournalType, JournalOptions } from '../src/journal/journal.js';
import type { JournalBatch } from '../src/journal/record.js';
import { claimSlotsNow } from '../src/journal/slot-lock.js';
import { encodePoints } from '../src/track-point/encode.js';
import { Ledger } from '../src/write-ahead/ledger.js';
import { benchPoints } from './lib/points.js';
import { median } from './lib/rounds.js';

type JournalClass = new (opts: JournalOptions) => JournalType;
const env = process.env;
const ROUNDS = Number(env.JOURNAL_ROUNDS ?? 5);
const RECORDS: Record<number, number> = { 1: Number(env.JOURNAL_RECORDS_1 ?? 200_000), 100: Number(env.JOURNAL_RECORDS_100 ?? 20_000) };
const builds: { name: string; Journal: JournalClass }[] = [
  { name: 'this tree', Journal: (await import('../src/journal/journal.js')).Journal },
  ...(await Promise.all(
    (env.JOURNAL_COMPARE ?? '')
      .split(',')
      .filter(Boolean)
      .map(async (path, i) => ({
        name: `compared${i === 0 ? '' : ` ${i + 1}`} (${path})`,
        Journal: ((await import(pathToFileURL(resolve(path)).href)) as { Journal: JournalClass }).Journal,
      })),
  )),
];

function batchOf(points: number): JournalBatch {
  const e = encodePoints(benchPoints(points, 'journal-bench'));
  return { count: e.count, data: Buffer.from(e.data), messages: e.messages.slice() };
}

/** µs of CPU (user + system, this process) per point for `records` records of `batch`. */
function measure(Journal: JournalClass, sync: 'process' | 'disk', batch: JournalBatch, records: number): number {
  const dir = mkdtempSync(join(tmpdir(), 'bench-journal-'));
  // The slot claimed as a worker claims it; `slot` and `slots` too, for a compared build from before
  // the claim (JOURNAL_COMPARE), which reads them instead.
  const claim = claimSlotsNow({ files: diskFiles, dir, slot: 0, slotsInUse: 1 });
  const options = { dir, claim, slot: 0, slots: 1, maxBytes: 2 ** 40, sync };
  const journal = new Journal(options);
  // As a sink appends and counts acknowledgements (write-ahead/ledger.ts); a build of before the
  // ledger left the journal (JOURNAL_COMPARE) counts them in the journal itself.
  const legacy = journal as unknown as Partial<{ acknowledged(id: number, count: number): unknown }>;
  const ledger = legacy.acknowledged === undefined ? new Ledger(journal) : null;
  const run = (n: number) => {
    for (let i = 1; i <= n; i++) {
      if (ledger !== null) {
        const r = ledger.append(batch, 1_700_000_000_000 + i);
        ledger.acknowledged(r.id, batch.count);
      } else {
        const r = journal.append(batch, 1_700_000_000_000 + i) as unknown as { id: number };
        legacy.acknowledged!(r.id, batch.count);
      }
      if (i % 10 === 0) journal.flushMarks();
    }
  };
  try {
    run(Math.ceil(records / 10)); // warm-up: the JIT, and the first segments and spares
    const t0 = process.cpuUsage();
    run(records);
    const cpu = process.cpuUsage(t0);
    return (cpu.user + cpu.system) / (records * batch.count);
  } finally {
    journal.close();
    claim.release();
    rmSync(dir, { recursive: true, force: true });
  }
}

console.log(
  `the journal alone (append, acknowledged, marks every 10 records), Node ${process.version}, ${ROUNDS} rounds, builds alternating; µs of CPU per point`,
);
console.log('| mode | points per request | round | ' + builds.map((b) => b.name).join(' | ') + ' |');
console.log('|---|---|---|' + builds.map(() => '---|').join(''));
const results = new Map<string, number[]>();
for (const sync of ['process', 'disk'] as const) {
  for (const points of [100, 1]) {
    const batch = batchOf(points);
    for (let round = 1; round <= ROUNDS; round++) {
      const order = round % 2 === 1 ? builds : [...builds].reverse();
      const row = new Map<string, number>();
      for (const b of order) row.set(b.name, measure(b.Journal, sync, batch, RECORDS[points]!));
      for (const [name, us] of row) results.set(`${sync}|${points}|${name}`, [...(results.get(`${sync}|${points}|${name}`) ?? []), us]);
      console.log(`| ${sync} | ${points} | ${round} | ${builds.map((b) => row.get(b.name)!.toFixed(3)).join(' | ')} |`);
    }
  }
}
if (builds.length > 1) {
  console.log('\nratio this tree / each compared build, the median of the rounds:');
  for (const sync of ['process', 'disk']) {
    for (const points of [100, 1]) {
      const ours = median(results.get(`${sync}|${points}|this tree`)!);
      const ratios = builds
        .slice(1)
        .map(
          (b) =>
            `${(ours / median(results.get(`${sync}|${points}|${b.name}`)!)).toFixed(3)} (${ours.toFixed(3)} / ${median(results.get(`${sync}|${points}|${b.name}`)!).toFixed(3)})`,
        );
      console.log(`  ${sync}, ${points} points per request: ${ratios.join(', ')}`);
    }
  }
}
