// The power-cut property of the write-ahead journal, checked at every step of a seeded workload
// (test/unit/journal/power-cut.test.ts runs it; the mutation tests run it on broken copies of the
// journal to show that it fails).
//
// A workload drives a journal on a crashable file system (crashable-files.ts) the way the write-ahead
// path does: appends of 1 to 10,000 points, each answered once its group commit completed
// (JOURNAL_SYNC=disk) or at once (process); acknowledgements, whole and in parts, and their marks;
// segment roll-over and spare reuse (small segments); a full journal and a disk that refuses writes; a
// disk that fails any operation with EIO or ENOSPC for a while, the journal failing and its worker
// restarted on what the disk holds; close and reopen; power cuts it carries on from. After every file
// operation it cuts the power several times (one cut keeps nothing that was not synced, the others are
// drawn at random), recovers a journal from each image and checks:
//   - recovery does not throw;
//   - every record whose commit completed (its request had a 202) and that Kafka has not acknowledged
//     comes back, byte for byte, with its timestamp;
//   - nothing comes back that was never written, nothing twice, and in the order it was written;
//   - a record marked done may come back (a duplicate, counted by the producer as possible), never
//     costs another record;
// and, now and then, damages a record of the image (a flipped byte anywhere in it, its header
// included, or a torn end) and checks that the damaged record is counted and skipped, and the others
// still come back.
import { crc32 } from 'node:zlib';
import type { Journal as JournalType, JournalOptions } from '../../src/journal/journal.js';
import { Ledger } from '../../src/write-ahead/ledger.js';
import { recordBytes, scanSegment, type JournalBatch, type JournalRecord } from '../../src/journal/record.js';
import { makeDurableDir } from '../../src/journal/slot-files.js';
import { claimSlotsNow, type SlotClaim } from '../../src/journal/slot-lock.js';
import { encodePoints } from '../../src/track-point/encode.js';
import { messagesOf } from '../../support/messages.js';
import { CrashableFiles, seeded, type CutKind } from './crashable-files.js';

export type JournalClass = new (opts: JournalOptions) => JournalType;

/** Each journal's ledger of what Kafka acknowledged (write-ahead/ledger.ts), as a sink keeps one. */
const ledgers = new WeakMap<JournalType, Ledger>();
function ledgerOf(journal: JournalType): Ledger {
  let ledger = ledgers.get(journal);
  if (ledger === undefined) ledgers.set(journal, (ledger = new Ledger(journal)));
  return ledger;
}

export interface WorkloadOptions {
  Journal: JournalClass;
  seed: number;
  sync: 'disk' | 'process';
  /** Actions of the workload (each makes zero or more file operations). */
  actions: number;
  /** Power cuts drawn after each file operation. */
  draws: number;
  /** Process mode: offer mappings (the journal then copies records into them). */
  mappable?: boolean;
  /** Whether the disk fails now and then (default true). */
  faults?: boolean;
  /** How the service makes the journal's directory (slot-files.ts): a mutant's copy passes its own. */
  makeDurableDir?: typeof makeDurableDir;
}

export interface WorkloadResult {
  /** File operations after which the power was cut. */
  cutPoints: number;
  recoveries: number;
  /** The first violation, with what replays it; null when every check held. */
  violation: string | null;
  /** Counts of what the workload did, to see that it did it. */
  did: Record<string, number>;
  /** Process mode: the most records answered 202 that one power cut lost. */
  lostToPowerCuts: number;
  /** Operations the failing disk failed, by syscall. */
  faults: Record<string, number>;
}

const DIR = '/journal';
const MAX_BYTES = [64 * 1024, 256 * 1024, 4 * 1024 * 1024];
/** Segments much smaller than the journal: rolled over, kept as spares and written over often. */
const SEGMENT_BYTES = [4 * 1024, 16 * 1024, 64 * 1024];

interface Written {
  readonly batch: JournalBatch;
  readonly timestamp: number;
}

class Violation extends Error {}
/** A recovery the failing disk failed: tried again, as a restarted worker does. */
class RecoveryFailed extends Error {}

/** A request of `n` points whose keys name record `id` (`r<id>-<i>`), as the producer hands it over. */
function batchFor(id: number, points: number, random: () => number): JournalBatch {
  const e = encodePoints(
    Array.from({ length: points }, (_, i) => ({
      container_id: `r${id}-${i}`,
      lat: Math.round(random() * 180 - 90),
      lon: i % 180,
      timestamp: '2024-05-01T12:00:00Z',
      speed: i,
    })),
  );
  return { count: e.count, data: Buffer.from(e.data), messages: e.messages.slice() };
}

/** The record id a recovered record names, or null. */
function idOf(record: JournalBatch): number | null {
  const key = messagesOf({ ...record, count: Math.min(record.count, 1) }).keys[0];
  const m = key === undefined ? null : /^r(\d+)-0$/.exec(key);
  return m === null ? null : Number(m[1]);
}

function sameRecord(a: JournalRecord, b: Written): boolean {
  return (
    a.count === b.batch.count &&
    a.timestamp === b.timestamp &&
    Buffer.from(a.data.buffer, a.data.byteOffset, a.data.byteLength).equals(
      Buffer.from(b.batch.data.buffer, b.batch.data.byteOffset, b.batch.data.byteLength),
    ) &&
    Buffer.from(a.messages.buffer, a.messages.byteOffset, 16 * a.count).equals(
      Buffer.from(b.batch.messages.buffer, b.batch.messages.byteOffset, 16 * b.batch.count),
    )
  );
}

/** A seed for one draw of one cut, apart from the workload's own stream: a failure replays exactly. */
const drawSeed = (seed: number, step: number, draw: number) => (Math.imul(seed ^ 0x9e3779b9, 2654435761) + Math.imul(step, 40503) + draw * 7919) >>> 0;

export async function runWorkload(opts: WorkloadOptions): Promise<WorkloadResult> {
  const { Journal, seed, sync, draws } = opts;
  const random = seeded(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const maxBytes = pick(MAX_BYTES);
  const segmentBytes = pick(SEGMENT_BYTES);
  const did: Record<string, number> = {};
  const count = (what: string) => (did[what] = (did[what] ?? 0) + 1);
  const written = new Map<number, Written>();
  const promised = new Set<number>();
  const done = new Set<number>();
  /** Journal id → record id, for what is in flight in the live journal. */
  let inFlight = new Map<number, number>();
  let nextId = 0;
  let life = 0;
  let cutPoints = 0;
  let recoveries = 0;
  let lastStep = 'none';

  /** The slot claimed and its journal opened on `files`, as a worker does (the primary made the directory). */
  const makeDir = opts.makeDurableDir ?? makeDurableDir;
  const openWithClaim = (files: CrashableFiles): { journal: JournalType; claim: SlotClaim } => {
    makeDir(files, DIR);
    const claim = claimSlotsNow({ files, dir: DIR, slot: 0, slotsInUse: 1 });
    try {
      return { journal: new Journal({ dir: DIR, claim, maxBytes, segmentBytes, sync, syncIntervalMs: 0, files }), claim };
    } catch (err) {
      claim.release();
      throw err;
    }
  };
  const open = (files: CrashableFiles) => openWithClaim(files).journal;

  /** Recovers a journal from `files`; checks what it gives back. Returns the ids in order and the journal. */
  let lostToPowerCuts = 0;
  /**
   * Recovers a journal from `files`; checks what it gives back. `mayLose`: process mode after a power
   * cut, where a 202 promised nothing of the disk (counted instead).
   */
  const recover = (
    files: CrashableFiles,
    where: string,
    mayLose = false,
  ): { ids: number[]; journal: JournalType; claim: SlotClaim; records: { id: number; inFlightId: number }[] } => {
    recoveries++;
    let journal: JournalType;
    let claim: SlotClaim;
    let got: ReturnType<Ledger['nextRecovered']>;
    try {
      ({ journal, claim } = openWithClaim(files));
      got = ledgerOf(journal).nextRecovered(Number.MAX_SAFE_INTEGER);
    } catch (err) {
      // A failing disk may fail a recovery: the worker is restarted and tries again (recoverOnFailingDisk).
      if (files.faults !== null && err instanceof Error && err.name === 'JournalError') throw new RecoveryFailed(err.message);
      throw new Violation(`${where}: recovery threw: ${(err as Error).stack}`);
    }
    const ids: number[] = [];
    const records: { id: number; inFlightId: number }[] = [];
    for (const { record, inFlight: f } of got) {
      const id = idOf(record);
      const original = id === null ? undefined : written.get(id);
      if (id === null || original === undefined)
        throw new Violation(
          `${where}: recovery gave back a record that was never written (first key ${messagesOf({ ...record, count: Math.min(1, record.count) }).keys[0]})`,
        );
      if (!sameRecord(record, original))
        throw new Violation(
          `${where}: record r${id} came back changed (${record.count} points, timestamp ${record.timestamp}; written: ${original.batch.count}, ${original.timestamp})`,
        );
      if (ids.length > 0 && id <= ids[ids.length - 1]!)
        throw new Violation(`${where}: record r${id} came back after r${ids[ids.length - 1]} (out of order, or twice)`);
      ids.push(id);
      records.push({ id, inFlightId: f.id });
    }
    const back = new Set(ids);
    const lost = [...promised].filter((id) => !done.has(id) && !back.has(id));
    if (mayLose) lostToPowerCuts = Math.max(lostToPowerCuts, lost.length);
    else if (lost.length > 0)
      throw new Violation(`${where}: ${lost.length} record(s) answered 202 and not acknowledged by Kafka did not come back: r${lost.slice(0, 10).join(', r')}`);
    return { ids, journal: journal!, claim: claim!, records };
  };

  /**
   * A worker restarted on the live disk (its journal failed, or an orderly restart): recovered as
   * often as the failing disk fails it, the disk healed after three tries so that the workload goes on.
   */
  const recoverOnFailingDisk = (where: string) => {
    for (let attempt = 1; ; attempt++) {
      try {
        return recover(files, where);
      } catch (err) {
        if (!(err instanceof RecoveryFailed)) throw err;
        files.processDied();
        count('recovery failed by the disk');
        if (attempt === 3) files.faults = null;
      }
    }
  };

  /** Damages one record of the image (a flipped byte anywhere in it, header included, or the file torn inside it): it must be counted and skipped, the rest still come back. */
  const damage = (image: CrashableFiles, before: number[], where: string, mayLose: boolean) => {
    let segments: string[];
    try {
      segments = image.list(DIR).filter((n) => n.endsWith('.wal'));
    } catch {
      return; // a power cut before the journal's directory was made
    }
    if (segments.length === 0) return;
    const name = pick(segments);
    const path = `${DIR}/${name}`;
    const bytes = Buffer.from(image.bytesOf(path)!);
    const seq = Number(/\.(\d+)\.wal$/.exec(name)![1]);
    const chain: { at: number; bytes: number; id: number | null; alone: boolean }[] = [];
    const items = [...scanSegment(bytes, seq)];
    for (const [i, item] of items.entries()) {
      // Alone: no damage beside it in the image already (a damaged header there could hide how many records a gap took).
      if (item.kind === 'record')
        chain.push({
          at: item.at,
          bytes: recordBytes(item.record),
          id: idOf(item.record),
          alone: items[i - 1]?.kind !== 'damaged' && items[i + 1]?.kind !== 'damaged',
        });
    }
    if (chain.length === 0) return;
    const torn = random() < 0.3;
    const victim = torn ? chain[chain.length - 1]! : pick(chain);
    let damaged: Buffer;
    let flippedAt = -1;
    if (torn) damaged = bytes.subarray(0, victim.at + 4 + Math.floor(random() * (victim.bytes - 4)));
    else {
      const at = victim.at + Math.floor(random() * victim.bytes);
      flippedAt = at;
      damaged = Buffer.from(bytes);
      damaged[at] = damaged[at]! ^ (1 + Math.floor(random() * 255));
    }
    const hurt = image.cut(() => 0, 'everything');
    hurt.setBytes(path, damaged);
    const undamaged = open(image);
    undamaged.nextRecovered(Number.MAX_SAFE_INTEGER);
    const what = `${where}, ${torn ? 'torn' : 'a byte flipped'} in ${name} at record r${victim.id}`;
    const saved = [...promised];
    // The damaged record is no longer the journal's to give back: it is not a loss of the journal's.
    if (victim.id !== null) promised.delete(victim.id);
    try {
      const after = recover(hurt, what, mayLose);
      // A flipped byte adds exactly one where the record has no damage beside it; beside damage
      // already in the image, a damaged header says what it can of the gap before it, and the count
      // is one at least. A torn end cuts off what came after the record, damage included.
      const counted = after.journal.damagedRecords;
      if (torn || !victim.alone ? counted < 1 : counted !== undamaged.damagedRecords + 1) {
        const items = (b: Buffer) =>
          [...scanSegment(b, seq)].map((x) => (x.kind === 'record' ? `r${x.index}@${x.at}` : `damaged ${x.records}@${x.at}`)).join(' ');
        throw new Violation(
          `${what}: ${counted} damaged records counted, ${undamaged.damagedRecords} without the damage: the damaged record was not counted, or not as one (the segment read ${items(bytes)}; damaged at ${flippedAt} of ${damaged.byteLength} bytes, ${items(damaged)}; header ${damaged.subarray(victim.at, victim.at + 40).toString('hex')})`,
        );
      }
      if (victim.id !== null && after.ids.includes(victim.id)) throw new Violation(`${what}: the damaged record came back`);
      const missing = before.filter((id) => id !== victim.id && !after.ids.includes(id));
      if (missing.length > 0) throw new Violation(`${what}: records after the damaged one no longer came back: r${missing.join(', r')}`);
    } finally {
      for (const id of saved) promised.add(id);
    }
    count(torn ? 'damaged: torn' : 'damaged: a byte flipped');
  };

  let violation: string | null = null;
  const onStep = (step: number, what: string) => {
    if (process.env.POWER_CUT_TRACE) console.log(`step ${step}: ${what}; promised ${[...promised].filter((id) => !done.has(id)).join(',')}`);
    try {
      cutAt(step, what);
    } catch (err) {
      // Thrown where a sync completed (the loop's turn): kept for the workload to return.
      if (!(err instanceof Violation)) throw err;
      violation ??= err.message;
      files.onStep = undefined;
    }
  };
  const cutAt = (step: number, what: string) => {
    lastStep = `step ${step} (${what})`;
    cutPoints++;
    if (/^create .*\.wal$/.test(what)) count('segment created');
    else if (/^rename .*\.spare to .*\.wal$/.test(what)) count('spare written over');
    for (let draw = 0; draw < draws; draw++) {
      // Disk mode: the harshest cut first. Process mode: first a crash of the process alone (the page
      // cache survives: nothing may be lost), then power cuts (what they lose is counted, not refused).
      const kind: CutKind = draw === 0 ? (sync === 'disk' ? 'nothing' : 'everything') : draw === 1 && sync === 'process' ? 'nothing' : 'random';
      const drawRandom = seeded(drawSeed(seed, step, draw));
      const image = files.cut(drawRandom, kind);
      const pristine = draw === draws - 1 && drawRandom() < 0.1 ? image.cut(drawRandom, 'everything') : null;
      const where = `seed ${seed}, power cut after ${lastStep}, draw ${draw} (${kind}; POWER_CUT_SEED=${seed} replays it)`;
      const mayLose = sync === 'process' && kind !== 'everything';
      const { ids } = recover(image, where, mayLose);
      if (pristine !== null)
        damage(
          pristine,
          ids.filter((id) => !done.has(id) && promised.has(id)),
          where,
          mayLose,
        );
    }
  };

  let files = new CrashableFiles({ onStep, mappable: opts.mappable });
  // Some workloads start where an earlier version left its spill journal: its points had their 202,
  // and the journal imports them at open (every step of the import is a cut point too). The others
  // start on an empty disk: the journal's directory is made as the service makes it.
  if (random() < 0.25) {
    files.makeDir(DIR);
    files.syncDirSync('/');
    const parts: Buffer[] = [];
    for (let i = 0, n = 1 + Math.floor(random() * 6); i < n; i++) {
      const id = nextId++;
      const batch = batchFor(id, 1, random);
      const timestamp = 1_600_000_000_000 + id;
      written.set(id, { batch, timestamp });
      promised.add(id);
      const m = batch.messages;
      const value = Buffer.from(batch.data.subarray(m[0], m[1]));
      const key = Buffer.from(batch.data.subarray(m[2], m[3]));
      const head = Buffer.alloc(20);
      head.writeUInt32LE(key.byteLength, 4);
      head.writeUInt32LE(value.byteLength, 8);
      head.writeDoubleLE(timestamp, 12);
      const body = Buffer.concat([head.subarray(4), key, value]);
      head.writeUInt32LE(crc32(body), 0);
      parts.push(head.subarray(0, 4), body);
    }
    files.setBytes(`${DIR}/worker-0.000000000001.spill`, Buffer.concat(parts));
    count('legacy spill imported');
  }
  let { journal, claim } = openWithClaim(files);

  /** After a restart (close and reopen, or a power cut): what came back is in flight again. */
  const adopt = (records: { id: number; inFlightId: number }[]) => {
    inFlight = new Map(records.map((r) => [r.inFlightId, r.id]));
  };

  const append = (): void => {
    const big = random() < 0.04;
    const points = big ? 1000 + Math.floor(random() * 9001) : random() < 0.8 ? 1 + Math.floor(random() * 5) : 6 + Math.floor(random() * 195);
    const id = nextId++;
    const batch = batchFor(id, points, random);
    const timestamp = 1_700_000_000_000 + id;
    if (!journal.fits(recordBytes(batch))) {
      count('journal full');
      return;
    }
    written.set(id, { batch, timestamp });
    let record;
    try {
      record = ledgerOf(journal).append(batch, timestamp);
    } catch (err) {
      // By name: a mutant's copy of the journal (power-cut-mutants.test.ts) has a class of its own.
      if (!(err instanceof Error && err.name === 'JournalError')) throw err;
      count(journal.failure === null ? 'write refused' : 'write failed');
      return;
    }
    count(points >= 1000 ? 'append 1000+' : 'append');
    inFlight.set(record.id, id);
    if (sync === 'process') promised.add(id);
    else {
      const at = life;
      journal.afterCommit((err) => {
        if (err === null && at === life) promised.add(id);
      });
    }
  };

  const acknowledge = () => {
    if (inFlight.size === 0) return;
    // Kafka acknowledges mostly in the order records were produced (partitions interleave a little).
    const jid = random() < 0.8 ? inFlight.keys().next().value! : pick([...inFlight.keys()]);
    const r = ledgerOf(journal).get(jid);
    if (r === undefined) return;
    const n = random() < 0.7 ? r.remaining : 1 + Math.floor(random() * r.remaining);
    // Kafka has the record once its last point is acknowledged, before the journal hears of it: from
    // then on it may be gone from the disk at any step of acknowledged().
    const id = inFlight.get(jid)!;
    if (n === r.remaining) done.add(id);
    if (ledgerOf(journal).acknowledged(jid, n) !== null) {
      if (!done.has(id)) throw new Error(`the journal took record r${id} for done before all its points were acknowledged`);
      inFlight.delete(jid);
      count('acknowledged');
    }
  };

  /**
   * The worker's restart, on the same disk: close (disk mode: syncs, or answers with the failure, what
   * waited), the process gone with its descriptors and locks, and a new one recovering the slot.
   */
  const restart = (where: string) => {
    try {
      journal.close();
    } catch {
      /* a failing disk: the worker exits all the same */
    }
    claim.release();
    files.processDied();
    life++;
    const next = recoverOnFailingDisk(where);
    ({ journal, claim } = next);
    adopt(next.records);
  };

  // A failing disk's errors drawn from a stream of their own: the workload's own draws stay as they are.
  const faultRandom = seeded(seed ^ 0x5eed);
  const faultCounts: Record<string, number> = {};
  const faultsSoFar = () => {
    const all = { ...faultCounts };
    for (const [syscall, n] of Object.entries(files.failed)) all[syscall] = (all[syscall] ?? 0) + n;
    return all;
  };
  try {
    for (let i = 0; i < opts.actions && violation === null; i++) {
      const r = random();
      if (r < 0.37) append();
      else if (r < 0.68) acknowledge();
      else if (r < 0.76) journal.flushMarks();
      else if (r < 0.86) await new Promise((resolve) => setImmediate(resolve));
      else if (r < 0.9) {
        files.capacity = files.usedBytes() + Math.floor(random() * 64 * 1024);
        count('disk nearly full');
      } else if (r < 0.94) files.capacity = Infinity;
      else if (r < 0.955 && opts.faults !== false) {
        files.faults = files.faults === null ? { rate: pick([0.02, 0.1, 0.3]), random: faultRandom } : null;
        count(files.faults === null ? 'disk healed' : 'disk failing');
      } else if (r < 0.97) {
        // An orderly restart: close (disk mode: syncs and answers what waited), then reopen.
        restart(`seed ${seed}, reopened after a close at ${lastStep}`);
        count('closed and reopened');
      } else {
        // A power cut the workload carries on from: one image, recovered, written to again.
        const image = files.cut(seeded(drawSeed(seed, files.stepCount, 99)), 'random');
        files.onStep = undefined;
        life++;
        // What survived (process mode may lose records; disk mode loses none, checked here): from
        // now on only that is expected back, at the cut points of the recovery itself too.
        const where = `seed ${seed}, restarted after a power cut at ${lastStep}`;
        const survived = new Set(
          recover(
            image.cut(() => 0, 'everything'),
            where,
            sync === 'process',
          ).ids,
        );
        for (const id of promised) if (!survived.has(id)) promised.delete(id);
        for (const [syscall, n] of Object.entries(files.failed)) faultCounts[syscall] = (faultCounts[syscall] ?? 0) + n;
        files = image;
        files.onStep = onStep;
        const next = recover(files, where);
        ({ journal, claim } = next);
        adopt(next.records);
        count('power cut and restart');
      }
      // The journal failed (the disk failed a write or a sync): it takes nothing more, and its worker
      // is restarted to recover from what the disk holds.
      if (journal.failure !== null && violation === null) {
        count('journal failed');
        restart(`seed ${seed}, restarted after the journal failed at ${lastStep}`);
      }
    }
    // Let the last commits complete (their steps are cut points too).
    while (files.syncing) await new Promise((resolve) => setImmediate(resolve));
    if (violation !== null) throw new Violation(violation);
  } catch (err) {
    if (err instanceof Violation) return { cutPoints, recoveries, violation: err.message, did, lostToPowerCuts, faults: faultsSoFar() };
    throw err;
  } finally {
    files.onStep = undefined;
  }
  return { cutPoints, recoveries, violation: null, did, lostToPowerCuts, faults: faultsSoFar() };
}
