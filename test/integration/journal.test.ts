// The write-ahead journal with the real service and broker: what an earlier process left is produced
// again at start, in order, with its original timestamps, and the journal empties; points Kafka refuses
// after their 202 stay in it, are retried, survive a restart, and arrive once Kafka takes them; a full
// journal refuses with 500 journal_full and readiness says so; a full disk refuses before anything is
// taken. And ACK_MODE=delivered answers only after Kafka has the points.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { encodePoints } from '../../src/track-point/encode.js';
import { ACCOUNTING_HEADER, AccountedLoad, accountingRow } from '../helpers/accounting.js';
import { consumeAll, createTopic, deleteTopic, uniqueTopic } from '../../support/kafka.js';
import { journalDir, metric, point, postTrack, startService, until } from '../helpers/service.js';
import { openJournal } from '../helpers/journal.js';
import { fileTopic } from '../helpers/topic.js';

const KAFKA_SH = fileURLToPath(new URL('../../scripts/kafka.sh', import.meta.url));
const topic = fileTopic('journal');
const walFiles = (dir: string) => readdirSync(dir).filter((n) => n.endsWith('.wal'));

describe('what an earlier process left in the journal', () => {
  it('is produced again at start, in order, with the timestamps it was accepted with, and the journal empties', async () => {
    const dir = journalDir();
    // What a crashed two-worker run left: slots 0 and 1, started again with WORKERS=1 (slot 0 takes slot 1's).
    const perSlot = 300;
    const written: string[] = [];
    let doneBefore = 0;
    for (const slot of [0, 1]) {
      const { journal, claim } = openJournal({ dir, slot, slots: 2, maxBytes: 2 ** 30, sync: 'process' });
      for (let seq = 0; seq < perSlot; seq++) {
        const p = { ...point(`J${slot}-${seq % 7}`), speed: seq };
        const e = encodePoints([p]);
        const r = journal.append({ count: 1, data: Buffer.from(e.data), messages: e.messages.slice() }, 1_700_000_000_000 + seq);
        // A tenth acknowledged before the crash, and marked: not produced again.
        if (seq % 10 === 0) {
          journal.done(r);
          doneBefore++;
        } else written.push(JSON.stringify(p));
      }
      journal.close();
      claim.release(); // that run's worker crashed
    }
    expect(walFiles(dir)).toHaveLength(2);

    const svc = await startService({ MQ_TOPIC: topic, JOURNAL_DIR: dir, WORKERS: '1' });
    try {
      const ms = await until('the journal to be empty', async () => walFiles(dir).length === 0 && (await metric(svc.url, 'ingest_journal_records')) === 0);
      const messages = await consumeAll(topic, { expected: written.length, timeoutMs: 30_000 });
      const replayed = await metric(svc.url, 'ingest_journal_replayed_points_total{cause="restart"}');
      console.log(
        `journal at start: ${written.length + doneBefore} records in 2 files, ${doneBefore} marked done → ${messages.length} messages in Kafka, replayed ${replayed}, journal empty after ${ms} ms`,
      );
      expect(messages.map((m) => m.value).sort()).toEqual([...written].sort());
      expect(replayed).toBe(written.length);
      expect(await metric(svc.url, 'ingest_journal_possible_duplicates_total')).toBe(written.length);
      // Per container, the journal's order; each message keeps the timestamp it was accepted with.
      for (const m of messages) expect(m.timestamp).toBe(1_700_000_000_000 + (JSON.parse(m.value) as { speed: number }).speed);
      const byKey = new Map<string, number[]>();
      for (const m of [...messages].sort((a, b) => a.partition - b.partition || a.offset - b.offset)) {
        byKey.set(m.key, [...(byKey.get(m.key) ?? []), (JSON.parse(m.value) as { speed: number }).speed]);
      }
      for (const seqs of byKey.values()) expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
      expect(svc.output.some((l) => l.includes('the journal holds points an earlier process did not see acknowledged'))).toBe(true);
    } finally {
      expect(await svc.stop()).toBe(0);
    }
  });

  it('with a damaged header and a torn end: the others arrive, those two are counted and logged with their file and offset, the worker runs on', async () => {
    const dir = journalDir();
    // Written with pwritev: the file is its records alone, a quarter of it each.
    const { journal, claim } = openJournal({ dir, maxBytes: 2 ** 30, sync: 'process', mapSegments: false });
    for (const id of ['TORN-a', 'TORN-b', 'TORN-c', 'TORN-d']) {
      const e = encodePoints([{ ...point(id), speed: 0 }]);
      journal.append({ count: 1, data: Buffer.from(e.data), messages: e.messages.slice() }, Date.now());
    }
    journal.close();
    claim.release();
    const file = join(dir, walFiles(dir)[0]!);
    // A byte of TORN-b's header damaged (its length: the record's size can no longer be trusted), then
    // TORN-d cut short, as a crash during its write leaves it.
    const bytes = readFileSync(file);
    const one = bytes.byteLength / 4;
    bytes[one + 9] = bytes[one + 9]! ^ 0x20;
    writeFileSync(file, bytes);
    truncateSync(file, 3 * one + 50);
    const damagedTopic = await createTopic(uniqueTopic('journal-damaged'));
    const svc = await startService({ MQ_TOPIC: damagedTopic, JOURNAL_DIR: dir });
    try {
      await until('the journal to be empty', async () => walFiles(dir).length === 0);
      const keys = (await consumeAll(damagedTopic, { expected: 2, idleMs: 1_000 })).map((m) => m.key).sort();
      expect(keys).toEqual(['TORN-a', 'TORN-c']);
      expect(await metric(svc.url, 'ingest_journal_damaged_records_total')).toBe(2);
      const logged = svc.output.filter((l) => l.includes('journal file damaged')).map((l) => JSON.parse(l) as { file: string; at: number });
      expect(logged.map((l) => [l.file, l.at])).toEqual([
        [file, one],
        [file, 3 * one],
      ]);
      expect((await postTrack(svc.url, [point('after-damage')])).status).toBe(202);
    } finally {
      expect(await svc.stop()).toBe(0);
      await deleteTopic(damagedTopic);
    }
  });

  it('refuses to start when JOURNAL_DIR cannot be created, naming it (exit 2)', async () => {
    const file = join(journalDir(), 'a-file');
    writeFileSync(file, 'not a directory');
    await expect(startService({ MQ_TOPIC: topic, JOURNAL_DIR: join(file, 'journal') })).rejects.toThrow(
      /exited with 2[\s\S]*configuration error: JOURNAL_DIR: cannot use the journal directory .*a-file\/journal/,
    );
  });
});

describe('points that fail after their 202', () => {
  it('stay in the journal, are produced again after a back-off, survive a restart, and reach Kafka once it takes them', { timeout: 180_000 }, async () => {
    // A topic whose brokers refuse every batch (max.message.bytes=100): librdkafka reports each
    // accepted point as failed, after the 202. Nothing may be dropped.
    const refusing = await createTopic(uniqueTopic('refusing'));
    execFileSync(KAFKA_SH, ['topic-config', refusing, 'max.message.bytes=100'], { stdio: 'ignore' });
    const dir = journalDir();
    const first = await startService({ MQ_TOPIC: refusing, JOURNAL_DIR: dir, WORKERS: '2' });
    const load = new AccountedLoad(first.url, { connections: 4, pointsPerRequest: 10, pauseMs: 20 });
    load.start();
    await new Promise((r) => setTimeout(r, 3_000));
    await load.stop();
    const accepted = load.accepted;
    // Retried at least once each (the back-off starts at 1 s), refused again each time.
    await until(
      'every accepted point retried',
      async () => ((await metric(first.url, 'ingest_journal_replayed_points_total{cause="retry"}')) ?? 0) >= accepted,
      60_000,
    );
    expect(await metric(first.url, 'ingest_journal_records')).toBeGreaterThan(0);
    expect((await fetch(`${first.url}/readyz`)).status).toBe(200); // far from full: still ready
    expect(await first.stop()).toBe(0);
    expect(first.output.some((l) => l.includes('they stay in the journal and are produced again at the next start'))).toBe(true);
    expect(walFiles(dir).length).toBeGreaterThan(0);

    // The operator fixes the topic and restarts with one worker: slot 1's journal is taken by slot 0.
    execFileSync(KAFKA_SH, ['topic-config', refusing, 'max.message.bytes=1048588'], { stdio: 'ignore' });
    const second = await startService({ MQ_TOPIC: refusing, JOURNAL_DIR: dir, WORKERS: '1' });
    try {
      await until('the journal to be produced and empty', async () => walFiles(dir).length === 0, 60_000);
      const a = load.account(await consumeAll(refusing, { expected: accepted, timeoutMs: 30_000 }));
      console.log(`${ACCOUNTING_HEADER}\n${accountingRow('broker refuses every batch after the 202; service restarted; topic fixed', a)}`);
      expect(a.accepted).toBeGreaterThan(500);
      expect(a.lost).toBe(0);
      // Refused by the broker, none was written: produced again, none twice.
      expect(a.duplicated).toBe(0);
      expect(await metric(second.url, 'ingest_journal_replayed_points_total{cause="restart"}')).toBe(accepted);
    } finally {
      expect(await second.stop()).toBe(0);
      await deleteTopic(refusing);
    }
  });
});

describe('a full journal', () => {
  it('refuses with 500 journal_full and makes the worker unready until Kafka takes points again', { timeout: 120_000 }, async () => {
    const refusing = await createTopic(uniqueTopic('journal-full'));
    execFileSync(KAFKA_SH, ['topic-config', refusing, 'max.message.bytes=100'], { stdio: 'ignore' });
    const svc = await startService({ MQ_TOPIC: refusing, JOURNAL_MAX_BYTES: '1048576', MAX_BODY_BYTES: '65536', MAX_POINTS: '1000' });
    try {
      const batch = (i: number) => Array.from({ length: 100 }, (_, k) => point(`FULL-${i}`, { speed: k }));
      let i = 0;
      let accepted = 0;
      let answer = await postTrack(svc.url, batch(i++));
      while (answer.status === 202 && i < 1000) {
        accepted += 100;
        answer = await postTrack(svc.url, batch(i++));
      }
      const ready = await fetch(`${svc.url}/readyz`);
      const readyBody = (await ready.json()) as { reason?: string };
      console.log(
        `journal full after ${accepted} accepted points: POST → ${answer.status} ${JSON.stringify(answer.json)}; readyz → ${ready.status} ${JSON.stringify(readyBody)}`,
      );
      expect(accepted).toBeGreaterThan(3_000);
      expect([answer.status, answer.json.error, answer.headers.get('retry-after')]).toEqual([500, 'journal_full', '1']);
      expect(ready.status).toBe(503);
      expect(readyBody.reason).toMatch(/^journal full: \d+ of 1048576 bytes \(JOURNAL_MAX_BYTES\)/);

      execFileSync(KAFKA_SH, ['topic-config', refusing, 'max.message.bytes=1048588'], { stdio: 'ignore' });
      await until('the worker to be ready again', async () => (await fetch(`${svc.url}/readyz`)).status === 200, 60_000);
      expect((await postTrack(svc.url, batch(9999))).status).toBe(202);
      const found = await consumeAll(refusing, { expected: accepted + 100, timeoutMs: 30_000 });
      expect(new Set(found.map((m) => m.value)).size).toBe(accepted + 100);
    } finally {
      expect(await svc.stop()).toBe(0);
      await deleteTopic(refusing);
    }
  });

  // A real full disk: a tmpfs of 256 KiB mounted for the test (root only; CI runs as root).
  it.skipIf(process.getuid?.() !== 0)(
    'on a full disk refuses with 500 journal_full before anything is taken, and says why in /readyz and the log',
    { timeout: 60_000 },
    async () => {
      const mount = mkdtempSync(join(tmpdir(), 'journal-tmpfs-'));
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', mount]);
      const diskTopic = await createTopic(uniqueTopic('journal-disk-full'));
      const svc = await startService({ MQ_TOPIC: diskTopic, JOURNAL_DIR: mount });
      try {
        // Frozen, Kafka acknowledges nothing: the records stay, and the disk fills.
        execFileSync(KAFKA_SH, ['freeze-node', 'single'], { stdio: 'ignore' });
        const statuses: number[] = [];
        let refused: Awaited<ReturnType<typeof postTrack>> | null = null;
        for (let i = 0; i < 200 && refused === null; i++) {
          const r = await postTrack(
            svc.url,
            Array.from({ length: 20 }, (_, k) => point(`DISK-${i}`, { speed: k })),
          );
          statuses.push(r.status);
          if (r.status !== 202) refused = r;
        }
        const ready = (await (await fetch(`${svc.url}/readyz`)).json()) as { status: string; reason: string };
        execFileSync(KAFKA_SH, ['thaw-node', 'single'], { stdio: 'ignore' });
        const accepted = statuses.filter((s) => s === 202).length;
        console.log(
          `full disk (tmpfs 256 KiB): ${accepted} requests of 20 points accepted, then ${refused?.status} ${JSON.stringify(refused?.json)}; readyz: ${JSON.stringify(ready)}`,
        );
        expect(accepted).toBeGreaterThan(5);
        expect([refused?.status, refused?.json.error]).toEqual([500, 'journal_full']);
        expect(ready.reason).toMatch(/cannot write the journal file .*ENOSPC/);
        // pino writes asynchronously (sonic-boom): the line may reach the pipe after the 500 did.
        await until('the log to say why', async () => svc.output.some((l) => l.includes('cannot write the journal') && l.includes('ENOSPC')), 10_000);
        // Every point answered 202 reaches Kafka once it answers; the refused request is not there.
        const found = await consumeAll(diskTopic, { expected: accepted * 20, timeoutMs: 30_000 });
        expect(found.length).toBe(accepted * 20);
        await until('the worker to take points again', async () => (await postTrack(svc.url, [point('DISK-after')])).status === 202, 30_000);
      } finally {
        execFileSync(KAFKA_SH, ['thaw-node', 'single'], { stdio: 'ignore' });
        expect(await svc.stop()).toBe(0);
        execFileSync('umount', [mount]);
        rmSync(mount, { recursive: true, force: true });
        await deleteTopic(diskTopic);
      }
    },
  );
});

describe('ACK_MODE=delivered', () => {
  it('answers 500 delivery_failed when Kafka does not take the points, and keeps nothing to produce again', async () => {
    const refusing = await createTopic(uniqueTopic('delivered-refused'));
    execFileSync(KAFKA_SH, ['topic-config', refusing, 'max.message.bytes=100'], { stdio: 'ignore' });
    const dir = journalDir();
    const svc = await startService({ MQ_TOPIC: refusing, ACK_MODE: 'delivered', WORKERS: '1', JOURNAL_DIR: dir });
    try {
      const res = await postTrack(
        svc.url,
        Array.from({ length: 10 }, (_, i) => point(`REFUSED-${i}`)),
      );
      expect(res.status).toBe(500);
      expect(res.json.error).toBe('delivery_failed');
      expect(res.json.message).toMatch(/^none of the 10 track points was written to Kafka \(message size too large\); resend the whole request$/);
      expect(res.headers.get('retry-after')).toBe('1');
      expect(await metric(svc.url, 'ingest_journal_records')).toBe(0);
      expect(walFiles(dir)).toEqual([]);
    } finally {
      expect(await svc.stop()).toBe(0);
      await deleteTopic(refusing);
    }
  });

  it('answers 202 only once Kafka holds every point of the request', async () => {
    const svc = await startService({ MQ_TOPIC: topic, ACK_MODE: 'delivered', WORKERS: '1' });
    try {
      const points = Array.from({ length: 50 }, (_, i) => point(`DELIVERED-${i % 5}`, { speed: i }));
      const res = await postTrack(svc.url, points);
      expect(res.status).toBe(202);
      expect(res.json).toEqual({ accepted: 50 });
      // Already there: a consumer started after the answer finds all of them at once.
      const messages = (await consumeAll(topic, { expected: 0, timeoutMs: 10_000, idleMs: 1_000 })).filter((m) => m.key.startsWith('DELIVERED-'));
      expect(messages).toHaveLength(50);
    } finally {
      expect(await svc.stop()).toBe(0);
    }
  });
});

describe('JOURNAL_SYNC=disk', () => {
  it('answers 202 once the record is on the disk, and every point reaches Kafka', async () => {
    const diskTopic = await createTopic(uniqueTopic('journal-sync-disk'));
    const svc = await startService({ MQ_TOPIC: diskTopic, JOURNAL_SYNC: 'disk', WORKERS: '1' });
    try {
      const answers = await Promise.all(
        Array.from({ length: 20 }, (_, r) =>
          postTrack(
            svc.url,
            Array.from({ length: 5 }, (_, i) => point(`SYNC-${r}`, { speed: i })),
          ),
        ),
      );
      expect(answers.map((a) => a.status)).toEqual(Array(20).fill(202));
      expect(await consumeAll(diskTopic, { expected: 100, timeoutMs: 20_000 })).toHaveLength(100);
      expect(svc.output.join('\n')).toContain('"journalSync":"disk"');
    } finally {
      expect(await svc.stop()).toBe(0);
      await deleteTopic(diskTopic);
    }
  });
});
