// The records of the exactly-once sink on their way through its transactions (transactions.ts), and
// the queues that hold them: each queue counts its points, which admission and TRANSACTION_MAX_POINTS read.
import type { InFlightRecord } from './ledger.js';
import type { JournalBatch } from '../journal/record.js';

/**
 * A journal record on its way. Its messages (`batch`): null for a record of this process, taken from
 * the journal when produced (a view of the mapped segment, or read back from the file); a copy only
 * where the journal is not mapped (JOURNAL_SYNC=disk) and the record waits for a transaction, since
 * the next request reuses the request's buffers; as read back, for a record an earlier process left.
 * A copy of every request would cost its garbage on the hot path: see `make bench-cpu` with
 * `CPU_ENV=DELIVERY=exactly-once`.
 */
export interface Entry {
  readonly record: InFlightRecord;
  batch: JournalBatch | null;
  /** The record's messages (batch may be null). */
  readonly count: number;
  readonly timestamp: number;
  /** Messages librdkafka took so far in the current transaction. */
  produced: number;
}

/** Entries in journal order, and their points. */
export class Entries {
  private items: Entry[] = [];
  private pointsHeld = 0;

  get points(): number {
    return this.pointsHeld;
  }

  get length(): number {
    return this.items.length;
  }

  push(entry: Entry): void {
    this.items.push(entry);
    this.pointsHeld += entry.count;
  }

  /** Every entry, in order, the queue left empty. */
  takeAll(): Entry[] {
    const items = this.items;
    this.items = [];
    this.pointsHeld = 0;
    return items;
  }

  /** Puts `first` ahead of what the queue holds. */
  putFirst(first: readonly Entry[]): void {
    this.items = [...first, ...this.items];
    for (const entry of first) this.pointsHeld += entry.count;
  }

  /** Whether librdkafka has not yet taken every message of some entry. */
  someUnproduced(): boolean {
    return this.items.some((e) => e.produced < e.count);
  }

  [Symbol.iterator](): Iterator<Entry> {
    return this.items[Symbol.iterator]();
  }
}

/** A batch copied out of the request's buffers, which the next request reuses. */
export function copyOf(batch: JournalBatch): JournalBatch {
  return { count: batch.count, data: Buffer.from(batch.data), messages: batch.messages.slice() };
}
