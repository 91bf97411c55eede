// DELIVERY=exactly-once: each slot's committed journal position as the transactions (transactions.ts)
// know it: read at the start, written in every transaction, moved by every commit.
import type { InFlightRecord } from './ledger.js';
import { covers, positionMessage, type JournalPosition } from '../kafka/positions.js';
import type { ProducedBatch } from '../kafka/producer.js';
import type { Logger } from '../log.js';
import type { Entry } from './transaction-entries.js';

export interface SlotPositionsOptions {
  /** The journal directory's identity (journal/journal-id.ts): positions count in it. */
  journalId: string;
  positionsTopic: string;
  /** The position key (the transactional.id) of a slot. */
  keyOf: (slot: number) => string;
  /** Hands messages to librdkafka for another topic; whether it took them all. */
  produceTo: (topic: string, batch: ProducedBatch) => boolean;
  log: Logger;
}

export class SlotPositions {
  private readonly committed = new Map<number, JournalPosition>();

  constructor(private readonly opts: SlotPositionsOptions) {}

  /** The position keys of these slots. */
  keys(slots: readonly number[]): string[] {
    return slots.map((slot) => this.opts.keyOf(slot));
  }

  /** The positions read back at the start: those that count in this journal directory. */
  adopt(slots: readonly number[], found: Map<string, JournalPosition>): void {
    for (const slot of slots) {
      const position = found.get(this.opts.keyOf(slot));
      if (position === undefined) continue;
      if (position.journal !== this.opts.journalId) {
        this.opts.log.warn(
          { slot, position, journal: this.opts.journalId },
          'the committed position of this slot counts in another journal directory (a new volume?): ignored, every record this journal holds is produced',
        );
        continue;
      }
      this.committed.set(slot, position);
    }
  }

  /** For the log. */
  get all(): Record<number, JournalPosition> {
    return Object.fromEntries(this.committed);
  }

  /** Whether a committed position already covers a record an earlier process left. */
  covers(record: InFlightRecord): boolean {
    const position = this.committed.get(record.segment.slot);
    return position !== undefined && record.segment.seq >= 0 && covers(position, record.segment.seq, record.index);
  }

  /**
   * Each committed position written again, unchanged, as a transaction opens. librdkafka holds a
   * message to a partition new to the transaction until the coordinator has added it
   * (AddPartitionsToTxn): written only at the end, a position would cost every commit that round
   * trip. The newest position of a key is the one read back. Best effort: what librdkafka refuses
   * here it refuses again at the end, which aborts the transaction.
   */
  restate(): void {
    try {
      for (const [slot, position] of this.committed) this.produce(slot, position);
    } catch {
      // the end says it
    }
  }

  /** The last record of each slot among the entries (earlier versions' spill files have none). */
  of(entries: Iterable<Entry>): Map<number, JournalPosition> {
    const out = new Map<number, JournalPosition>();
    for (const { record } of entries) {
      if (record.segment.seq < 0) continue;
      out.set(record.segment.slot, { journal: this.opts.journalId, slot: record.segment.slot, seq: record.segment.seq, index: record.index });
    }
    return out;
  }

  /** Writes the positions in the open transaction; throws when librdkafka's queue did not take one. */
  write(positions: Map<number, JournalPosition>): void {
    for (const [slot, position] of positions) {
      if (!this.produce(slot, position)) {
        throw new Error(`librdkafka's queue did not take the position of slot ${slot} (queue.buffering.max.messages or .kbytes reached)`);
      }
    }
  }

  /** The transaction that wrote them is committed. */
  moved(positions: Map<number, JournalPosition>): void {
    for (const [slot, position] of positions) this.committed.set(slot, position);
  }

  private produce(slot: number, position: JournalPosition): boolean {
    return this.opts.produceTo(this.opts.positionsTopic, positionMessage(this.opts.keyOf(slot), position));
  }
}
