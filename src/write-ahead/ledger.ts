// What Kafka has acknowledged of each journal record in flight: a record gets an id (produceBatch's
// tag, which librdkafka counts acknowledgements by), and once every point of it is acknowledged, or
// a committed transaction covers it, it is done in the journal. The journal keeps files; this keeps
// the count.
import type { Journal, JournalEntry } from '../journal/journal.js';
import type { JournalBatch, JournalRecord } from '../journal/record.js';

/** Record ids wrap here: produceBatch's tags are 0 to 2^31 - 1. */
const ID_LIMIT = 2 ** 31;

/** A journal record Kafka has not yet acknowledged all points of. */
export interface InFlightRecord extends JournalEntry {
  readonly id: number;
  /** Points not yet acknowledged. */
  remaining: number;
  /** When this process produced it (performance.now()): the delivery latency counts from there. */
  readonly producedAt: number;
}

/** A record read back from what an earlier process left, in flight again under a new id. */
export interface RecoveredRecord {
  readonly record: JournalRecord;
  readonly inFlight: InFlightRecord;
}

export class Ledger {
  private readonly inFlight = new Map<number, InFlightRecord>();
  private nextId = 0;

  constructor(readonly journal: Journal) {}

  /** Appends the record of one accepted request to the journal (journal.append: it throws JournalError); in flight from now on. */
  append(batch: JournalBatch, timestamp: number): InFlightRecord {
    return this.track(this.journal.append(batch, timestamp));
  }

  /** Up to `max` records an earlier process left, each in flight under a new id (journal.nextRecovered). */
  nextRecovered(max: number): RecoveredRecord[] {
    return this.journal.nextRecovered(max).map(({ record, entry }) => ({ record, inFlight: this.track(entry) }));
  }

  /** The record of this id, while in flight. */
  get(id: number): InFlightRecord | undefined {
    return this.inFlight.get(id);
  }

  /**
   * Kafka acknowledged `count` points of record `id` (takeAcks). Returns the record once all its
   * points are (it is then done in the journal), else null.
   */
  acknowledged(id: number, count: number): InFlightRecord | null {
    const record = this.inFlight.get(id);
    if (record === undefined) return null;
    record.remaining -= count;
    if (record.remaining > 0) return null;
    this.inFlight.delete(id);
    this.journal.done(record);
    return record;
  }

  /** Points of the records in flight not yet acknowledged. */
  get pendingPoints(): number {
    let points = 0;
    for (const r of this.inFlight.values()) points += r.remaining;
    return points;
  }

  /** Points the journal holds that Kafka does not have yet: in flight, and left by an earlier process (an estimate until read back). */
  get pointsLeft(): number {
    return this.pendingPoints + this.journal.recoveredPoints;
  }

  /** The acceptance time (ms since the epoch) of the oldest record in flight, or null. */
  get oldestTimestamp(): number | null {
    let oldest: number | null = null;
    // In id order, which is nearly acceptance order: recovered records come after live ones.
    let looked = 0;
    for (const r of this.inFlight.values()) {
      if (oldest === null || r.timestamp < oldest) oldest = r.timestamp;
      if (++looked === 64) break;
    }
    return oldest;
  }

  private track(entry: JournalEntry): InFlightRecord {
    const id = this.nextId;
    this.nextId = (this.nextId + 1) % ID_LIMIT;
    // One shape for every record: the entry's fields copied, not spread.
    const { segment, index, at, points, timestamp } = entry;
    const record: InFlightRecord = { segment, index, at, points, timestamp, id, remaining: points, producedAt: performance.now() };
    this.inFlight.set(id, record);
    return record;
  }
}
