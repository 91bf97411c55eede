// Producing again what the journal holds and Kafka does not have yet, for the sinks that count
// Kafka's acknowledgements (at least once, delivered). Points whose delivery failed after their 202
// (retried after a back-off), and the records an earlier process left in the journal (a crash, a
// restart during an outage), produced again once Kafka takes points. Both go to the same producer,
// with their record's id as the tag and its original timestamp; both wait for room in librdkafka's
// queue, so that new requests keep their share of it. What an earlier process left is read back by
// readRecovered(), which the exactly-once sink's transactions call too.
import type { Ledger, RecoveredRecord } from './ledger.js';
import type { JournalBatch } from '../journal/record.js';
import type { FailedMessage } from '../kafka/delivery-reports.js';

/** After a retry in which Kafka took nothing, wait longer, up to this. */
const RETRY_BACKOFF_MIN_MS = 1_000;
const RETRY_BACKOFF_MAX_MS = 10_000;
/** Records read back from the journal per pass (every poll, 10 ms) at most, while the queue has room. */
const RECOVERED_PER_PASS = 256;

/** What replay needs of the producer. */
export interface ReplaySink {
  /** Hands messages to librdkafka under a tag and timestamp; returns how many it took (all, or the first n). */
  produce(batch: JournalBatch, tag: number, timestamp: number): number;
  /** Messages in librdkafka's queue now (rd_kafka_outq_len). */
  queueLength(): number;
  /** Whether Kafka takes points now. */
  kafkaAvailable(): boolean;
}

export interface ReplayCounts {
  /** Points produced again: after a failure in this process, or left by an earlier one. */
  retried: number;
  recovered: number;
  /** Of those, points Kafka may already have had (possibly persisted, or not marked done). */
  possibleDuplicates: number;
}

export class Replay {
  private failed: FailedMessage[] = [];
  private notBefore = 0;
  private backoffMs = RETRY_BACKOFF_MIN_MS;
  readonly counts: ReplayCounts = { retried: 0, recovered: 0, possibleDuplicates: 0 };

  constructor(
    private readonly ledger: Ledger,
    private readonly sink: ReplaySink,
    /** librdkafka's queue is shared: replay takes it up to this many messages, new requests the rest. */
    private readonly queueShare: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** Failed messages waiting to be produced again. */
  get backlog(): number {
    return this.failed.length;
  }

  /** A message of a journal record failed; it is produced again after the back-off. */
  fail(message: FailedMessage): void {
    if (this.failed.length === 0) this.notBefore = this.now() + this.backoffMs;
    this.failed.push(message);
  }

  /** Kafka acknowledged points: the next failure waits the shortest back-off again. */
  acknowledged(): void {
    this.backoffMs = RETRY_BACKOFF_MIN_MS;
  }

  /** Produces what is due, while Kafka takes points and the queue has room. Called every poll. */
  pass(): void {
    // A failed journal takes nothing more, and its worker is restarting: the next process replays.
    if (!this.sink.kafkaAvailable() || this.ledger.journal.failure !== null) return;
    if (this.failed.length > 0 && this.now() >= this.notBefore) this.retry();
    readRecovered(
      this.ledger,
      () => this.sink.queueLength() < this.queueShare,
      ({ record, inFlight }) => {
        const taken = this.sink.produce(record, inFlight.id, record.timestamp);
        this.counts.recovered += record.count;
        this.counts.possibleDuplicates += record.count;
        if (taken < record.count) this.keepUnproduced(inFlight.id, record, taken);
      },
    );
  }

  /** Every failed message, grouped by record (each record's own timestamp), in the order they failed. */
  private retry(): void {
    const failed = this.failed;
    this.failed = [];
    const byRecord = new Map<number, FailedMessage[]>();
    for (const m of failed) {
      const group = byRecord.get(m.id);
      if (group === undefined) byRecord.set(m.id, [m]);
      else group.push(m);
    }
    for (const [id, messages] of byRecord) {
      const record = this.ledger.get(id);
      if (record === undefined) continue; // acknowledged meanwhile (a report of a message retried twice)
      const batch = batchOf(messages);
      const taken = this.sink.produce(batch, id, record.timestamp);
      for (let i = 0; i < taken; i++) {
        this.counts.retried++;
        if (messages[i]!.possiblyWritten) this.counts.possibleDuplicates++;
      }
      if (taken < messages.length) this.failed.push(...messages.slice(taken));
    }
    // Failed again, or not taken: wait longer before the next try.
    if (this.failed.length > 0) {
      this.backoffMs = Math.min(RETRY_BACKOFF_MAX_MS, this.backoffMs * 2);
      this.notBefore = this.now() + this.backoffMs;
    }
  }

  /** A record librdkafka took only `taken` messages of: the rest wait with the failed ones. */
  keepUnproduced(id: number, batch: JournalBatch, taken: number): void {
    for (let i = taken; i < batch.count; i++) {
      const [vs, ve, ks, ke] = [batch.messages[4 * i]!, batch.messages[4 * i + 1]!, batch.messages[4 * i + 2]!, batch.messages[4 * i + 3]!];
      this.fail({ id, value: Buffer.from(batch.data.subarray(vs, ve)), key: Buffer.from(batch.data.subarray(ks, ke)), possiblyWritten: false });
    }
  }
}

/**
 * Reads back the records an earlier process left, in journal order, each to `take`, while `room()`
 * holds, at most RECOVERED_PER_PASS a call. A segment that cannot be read ends the pass: the journal
 * has failed then, and the worker is restarted (the next process reads it again).
 */
export function readRecovered(ledger: Ledger, room: () => boolean, take: (next: RecoveredRecord) => void): void {
  for (let n = 0; n < RECOVERED_PER_PASS && ledger.journal.recovering && room(); n++) {
    let next: RecoveredRecord | undefined;
    try {
      next = ledger.nextRecovered(1)[0];
    } catch {
      return;
    }
    if (next === undefined) return;
    take(next);
  }
}

/** Failed messages as one batch for produceBatch: values and keys in one buffer. */
function batchOf(messages: readonly FailedMessage[]): JournalBatch {
  let bytes = 0;
  for (const m of messages) bytes += m.value.byteLength + m.key.byteLength;
  const data = Buffer.allocUnsafe(bytes);
  const offsets = new Uint32Array(4 * messages.length);
  let at = 0;
  messages.forEach((m, i) => {
    offsets[4 * i] = at;
    at += m.value.copy(data, at);
    offsets[4 * i + 1] = at;
    offsets[4 * i + 2] = at;
    at += m.key.copy(data, at);
    offsets[4 * i + 3] = at;
  });
  return { count: messages.length, data, messages: offsets };
}
