// `make bench-replay`: how fast a worker produces again what a crashed process left in its journal.
// A journal of REPLAY_POINTS (1,000,000) points in requests of REPLAY_BATCH (100) is written as the
// service writes it (journal/journal.ts, the suite's points), the service is started on it with one
// worker, and the time from its start to the journal being empty (every record acknowledged by Kafka,
// ingest_journal_records 0) is measured; then the topic is read back to check every point arrived.
// A copy of the same journal is then produced by `drain` (process/drain.ts) to a topic of its own:
// its time from start to exit, and its own summary line, side by side with the service's.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { diskFiles } from '../src/journal/files.js';
import { Journal } from '../src/journal/journal.js';
import { claimSlotsNow } from '../src/journal/slot-lock.js';
import { encodePoints } from '../src/track-point/encode.js';
import { consumeAll, createTopic, deleteTopic, uniqueTopic } from '../support/kafka.js';
import { freePort } from '../support/ports.js';
import { benchPoints } from './lib/points.js';
import { startTarget } from './lib/targets.js';

const POINTS = Number(process.env.REPLAY_POINTS ?? 1_000_000);
const BATCH = Number(process.env.REPLAY_BATCH ?? 100);

const dir = mkdtempSync(join(tmpdir(), 'bench-replay-'));
const drainDir = `${dir}-drain`;
const topic = await createTopic(uniqueTopic('replay'));
const drainTopic = await createTopic(uniqueTopic('drain'));
try {
  // Written as a worker of slot 0 writes it, which then dies: the service's worker takes the slot.
  const claim = claimSlotsNow({ files: diskFiles, dir, slot: 0, slotsInUse: 1 });
  const journal = new Journal({ dir, claim, maxBytes: 2 ** 40, sync: 'process' });
  const points = benchPoints(BATCH, 'replay');
  for (let written = 0; written < POINTS; written += BATCH) {
    const e = encodePoints(points);
    journal.append({ count: e.count, data: Buffer.from(e.data), messages: e.messages.slice() }, Date.now());
  }
  const bytes = journal.bytes;
  journal.close();
  claim.release();
  cpSync(dir, drainDir, { recursive: true });

  const started = performance.now();
  const target = await startTarget('ours', await freePort(), { MQ_TOPIC: topic, WORKERS: '1', JOURNAL_DIR: dir }, undefined, 'listening');
  let records = -1;
  while (records !== 0) {
    await new Promise((r) => setTimeout(r, 100));
    const text = await (await fetch(`${target.url}/metrics`)).text();
    records = Number(/^ingest_journal_records (\d+)/m.exec(text)?.[1] ?? -1);
  }
  const seconds = (performance.now() - started) / 1000;
  await target.stop();
  const found = await consumeAll(topic, { expected: POINTS, timeoutMs: 120_000, idleMs: 2_000 });
  console.log(`journal of ${POINTS} points in ${POINTS / BATCH} records of ${BATCH} (${bytes} bytes, ${(bytes / POINTS).toFixed(1)} bytes per point)`);
  console.log(
    `produced again and acknowledged in ${seconds.toFixed(2)} s from the service's start: ${Math.round(POINTS / seconds)} points/s (start-up included)`,
  );
  console.log(`${found.length} messages in Kafka`);
  if (found.length < POINTS) process.exitCode = 1;

  const drainStarted = performance.now();
  const drain = spawnSync(process.execPath, ['dist/src/main.js', 'drain'], {
    env: { ...process.env, MQ_TOPIC: drainTopic, JOURNAL_DIR: drainDir, LOG_LEVEL: 'warn' },
    encoding: 'utf8',
  });
  const drainSeconds = (performance.now() - drainStarted) / 1000;
  const drained = await consumeAll(drainTopic, { expected: POINTS, timeoutMs: 120_000, idleMs: 2_000 });
  console.log(
    `drain of the same journal: exit ${drain.status} in ${drainSeconds.toFixed(2)} s from its start to its exit: ${Math.round(POINTS / drainSeconds)} points/s (start-up included)`,
  );
  console.log(drain.stdout.trim());
  console.log(`${drained.length} messages in Kafka`);
  if (drain.status !== 0 || drained.length < POINTS) process.exitCode = 1;
} finally {
  rmSync(dir, { recursive: true, force: true });
  rmSync(drainDir, { recursive: true, force: true });
  await deleteTopic(topic);
  await deleteTopic(drainTopic);
}
process.exit();
