// Replays the spill journal to Kafka once a broker is reachable again: files in the order they were
// written, records in file order, each with the timestamp it was accepted with. Journals left by an
// earlier run (or by a crashed predecessor in this slot) are replayed the same way after start-up.
//
// A replay uses its own short-lived producer with a delivery report for every message, so that "this
// file is done" is known exactly, without waiting for the live producer's queue to run empty, which
// under load it never does. Records that fail again are held in memory (a file is at most 64 MiB)
// and, once the whole file has reported, appended to the journal; then the file is deleted. A replay
// cut short (shutdown, crash) drops what it held and leaves the file in place: the next replay sends
// it again, so a record that was delivered can arrive twice, but none is dropped (at least once).
import Kafka from 'node-rdkafka';
import type { Logger } from '../log.js';
import type { WorkerMetrics } from '../metrics.js';
import type { SpillJournal, SpillRecord } from './spill-journal.js';

/** How often an idle worker looks whether its journal holds something and the broker is back. */
const SPILL_REPLAY_CHECK_MS = 1_000;
/** After a replay in which Kafka took nothing (it refuses these points), wait longer, up to this. */
const REPLAY_BACKOFF_MAX_MS = 10_000;
const CONNECT_TIMEOUT_MS = 10_000;

export interface ReplayDeps {
  journal: SpillJournal;
  topic: string;
  /** The live producer's settings; the replay producer reports every delivery and carries payloads. */
  settings: { global: Kafka.ProducerGlobalConfig; topic: Kafka.ProducerTopicConfig };
  log: Logger;
  metrics: WorkerMetrics;
  /** Whether Kafka takes points right now (the live producer's view). */
  brokerAvailable(): boolean;
}

export class SpillReplayer {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private stopping = false;
  /** No replay before this time (ms epoch): backing off while Kafka refuses the journal's points. */
  private notBefore = 0;
  private backoffMs = SPILL_REPLAY_CHECK_MS;

  constructor(private readonly deps: ReplayDeps) {}

  start(): void {
    this.timer = setInterval(() => this.tick(), SPILL_REPLAY_CHECK_MS);
    this.timer.unref();
    this.tick();
  }

  /** Ends a replay in progress at the next record batch; its file stays for the next run. */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.timer !== null) clearInterval(this.timer);
    await this.running;
  }

  private tick(): void {
    if (this.running !== null || this.stopping || this.deps.journal.isEmpty || Date.now() < this.notBefore || !this.deps.brokerAvailable()) return;
    this.running = this.replayAll()
      .catch((err: unknown) => this.deps.log.error({ err }, 'spill journal replay failed; retrying later'))
      .finally(() => {
        this.running = null;
      });
  }

  private async replayAll(): Promise<void> {
    const { journal, log, metrics } = this.deps;
    const files = journal.seal();
    if (files.length === 0) return;
    const started = Date.now();
    const progress = { produced: 0, reported: 0, delivered: 0, respilled: 0, lost: 0 };
    let failedAgain: SpillRecord[] = [];
    const producer = new Kafka.Producer(
      { ...this.deps.settings.global, 'client.id': `${String(this.deps.settings.global['client.id'])}-replay`, 'delivery.report.only.error': false, dr_msg_cb: true },
      this.deps.settings.topic,
    );
    producer.on('delivery-report', (err, report) => {
      progress.reported++;
      if (!err) {
        progress.delivered++;
        return;
      }
      // Failed again (the broker went away during the replay): kept until the file is done.
      const key = typeof report.key === 'string' ? Buffer.from(report.key) : report.key;
      if (key != null && report.value != null) failedAgain.push({ key, value: report.value, timestamp: report.timestamp ?? Date.now() });
      else progress.lost++;
    });
    let connected = false;
    try {
      await new Promise<void>((resolve, reject) =>
        producer.connect({ topic: this.deps.topic, timeout: CONNECT_TIMEOUT_MS }, (err) => (err ? reject(err) : resolve())),
      );
      connected = true;
      producer.setPollInterval(10);
      log.info({ files: files.length, bytes: journal.bytes }, 'replaying the spill journal');
      for (const file of files) {
        failedAgain = [];
        if (!(await this.replayFile(producer, file, progress))) break;
        // Back into the journal, in order, on disk before the file they came from is deleted.
        const releasing = journal.sizeOf(file);
        for (const r of failedAgain) {
          if (journal.append(r.key, r.value, r.timestamp, releasing)) progress.respilled++;
          else progress.lost++;
        }
        journal.flush();
        journal.remove(file);
      }
    } finally {
      if (connected) await new Promise<void>((resolve) => producer.disconnect(5_000, () => resolve()));
      metrics.spillReplayed.inc(progress.delivered);
      // A replay that delivered nothing while records failed again (a topic that refuses them, an
      // authorization error): retry later and later, not every second.
      if (progress.delivered === 0 && progress.reported > 0) {
        this.notBefore = Date.now() + this.backoffMs;
        this.backoffMs = Math.min(REPLAY_BACKOFF_MAX_MS, this.backoffMs * 2);
      } else {
        this.backoffMs = SPILL_REPLAY_CHECK_MS;
      }
      if (progress.lost > 0) metrics.pointsLost.labels('spill_full').inc(progress.lost);
      journal.flush();
      const level = progress.lost > 0 ? 'error' : progress.respilled > 0 ? 'warn' : 'info';
      log[level]({ ...progress, ms: Date.now() - started, journalBytes: journal.bytes }, 'spill journal replay ended');
    }
  }

  /** Sends one file; true once every record was acknowledged or appended to the journal again. */
  private async replayFile(producer: Kafka.Producer, file: string, progress: { produced: number; reported: number }): Promise<boolean> {
    for (const records of this.deps.journal.read(file)) {
      if (this.stopping) return false;
      for (const r of records) await this.produce(producer, r, progress);
      while (progress.reported < progress.produced) {
        if (this.stopping) return false;
        await new Promise((r) => setTimeout(r, 10));
      }
    }
    return true;
  }

  private async produce(producer: Kafka.Producer, r: SpillRecord, progress: { produced: number; reported: number }): Promise<void> {
    for (;;) {
      try {
        producer.produce(this.deps.topic, null, r.value, r.key, r.timestamp);
        progress.produced++;
        return;
      } catch (err) {
        if ((err as Kafka.LibrdKafkaError).code !== Kafka.CODES.ERRORS.ERR__QUEUE_FULL) throw err;
        await new Promise((res) => setTimeout(res, 10)); // librdkafka's queue is full: let it drain
      }
    }
  }
}
