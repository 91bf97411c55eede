// What the three sinks share before a request's points are theirs: whether they may be taken now,
// whether the worker is ready, and the request's journal record; and the figures /metrics reads. One set of checks, asked twice:
// before the body is read (admission, for the room the last refused request wanted) and once it is
// parsed (for the request's own points and bytes).
import type { ProducerRefusal } from '../api/errors.js';
import type { Journal, JournalSync } from '../journal/journal.js';
import { recordBytes } from '../journal/record.js';
import type { Throttled } from '../log.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import type { EncodedPoints } from '../track-point/encode.js';
import type { LateFailure, Pending, Refusal } from './acceptance.js';
import type { InFlightRecord, Ledger } from './ledger.js';
import type { ReplayCounts } from './replay.js';

/** Room a worker keeps in the journal to call itself ready: one request of 100 points, about. */
const JOURNAL_HEADROOM = 16 * 1024;

/** What admission reads of the producer (kafka/producer.ts). */
export interface AdmittingProducer {
  readonly refusal: ProducerRefusal | null;
  readonly queuedPoints: number;
  readonly messageMaxBytes: number;
  unreadyReason(): string | null;
}

export interface AdmissionOptions {
  journal: Journal;
  /** Whether new requests are written to the journal (all but ACK_MODE=delivered). */
  journaled: boolean;
  producer: AdmittingProducer;
  /** QUEUE_MAX_POINTS: librdkafka's queue and what the sink holds besides, together. */
  maxPoints: number;
  /** Points the sink holds in memory besides librdkafka's queue (to produce again, or for a transaction). */
  held: () => number;
  /** Why the mode itself takes nothing now (exactly once: its transactions not ready), or null. */
  modeUnready?: () => string | null;
}

export class Admission {
  /**
   * Room asked for before a body is read: one point, or as many as the last request that did not
   * fit, until one fits. Asked for one point while the queue sits just below its mark (a closed loop
   * at 100 points per request), admission let every request through to be parsed, refused, and
   * parsed again from the waiting room.
   */
  private roomWanted = 1;

  private readonly modeUnready: () => string | null;

  constructor(private readonly opts: AdmissionOptions) {
    this.modeUnready = opts.modeUnready ?? (() => null);
  }

  /** Why a request would be refused now, before its body is read. No side effect: the waiting room asks it every few milliseconds. */
  beforeBody(): ProducerRefusal | null {
    const refusal = this.refusalFor(this.roomWanted);
    if (refusal !== null) return refusal;
    const { journal } = this.opts;
    if (this.opts.journaled && (!journal.writable() || !journal.fits(JOURNAL_HEADROOM))) return 'journal_full';
    return null;
  }

  /** Why this parsed request cannot be taken whole, or null. */
  forBatch(batch: EncodedPoints): Refusal | null {
    const refusal = this.refusalFor(batch.count);
    if (refusal !== null) {
      if (refusal === 'queue_full') this.roomWanted = batch.count;
      return refusal;
    }
    this.roomWanted = 1;
    if (batch.largestValue > this.opts.producer.messageMaxBytes) return 'message_too_large';
    if (this.opts.journaled && !this.opts.journal.fits(recordBytes(batch))) return 'journal_full';
    return null;
  }

  private refusalFor(points: number): ProducerRefusal | null {
    const { journal, producer } = this.opts;
    if (this.opts.journaled && journal.failure !== null) return 'journal_failed';
    const refusal = producer.refusal ?? (this.modeUnready() === null ? null : 'producer_failed');
    if (refusal !== null) return refusal;
    // The queue is librdkafka's and what the sink holds: both in memory.
    if (producer.queuedPoints + this.opts.held() + points > this.opts.maxPoints) return 'queue_full';
    return null;
  }

  /** /readyz: a journal that failed (the worker is being restarted), what Kafka allows, the mode, then whether the journal takes records. */
  readiness(): { ready: boolean; reason: string } {
    const { journal, producer } = this.opts;
    const failure = journal.failure;
    if (failure !== null) return { ready: false, reason: `the journal failed (${failure.message}): this worker takes no points and is being restarted` };
    const unready = producer.unreadyReason() ?? this.modeUnready();
    if (unready !== null) return { ready: false, reason: unready };
    if (!journal.writable()) return { ready: false, reason: journal.noRoom?.message ?? 'the journal cannot be written' };
    if (this.opts.journaled && !journal.fits(JOURNAL_HEADROOM)) {
      return { ready: false, reason: `journal full: ${journal.bytes} of ${journal.capacity} bytes (JOURNAL_MAX_BYTES) hold points Kafka has not acknowledged` };
    }
    return { ready: true, reason: 'ok' };
  }
}

/**
 * A request's record appended to the journal (in the OS before the answer: the 202 stands on it
 * whatever happens to the process next), or why not.
 */
export function appendRecord(ledger: Ledger, batch: EncodedPoints, timestamp: number, errors: Throttled): InFlightRecord | 'journal_failed' | 'journal_full' {
  try {
    return ledger.append(batch, timestamp);
  } catch (err) {
    // Failed for good: the journal said so once (onFailure), and the worker restarts.
    if (ledger.journal.failure !== null) return 'journal_failed';
    errors.report({ err });
    return 'journal_full';
  }
}

/**
 * JOURNAL_SYNC=disk: the answer of every request taken waits for the group commit after its record.
 * One object serves them all: the edge registers its answer at once, before the next request is taken.
 */
export function afterCommit(sync: JournalSync, journal: Journal): Pending | null {
  return sync === 'disk' ? { whenAnswerable: (answer) => journal.afterCommit((err) => answer(err === null ? null : commitFailed(err))) } : null;
}

/** JOURNAL_SYNC=disk: the sync a request's 202 waited for failed. */
function commitFailed(err: Error): LateFailure {
  return {
    code: 'journal_failed',
    message: `the disk failed to sync this request's journal record (${err.message}); its points may still reach Kafka (the worker restarts and produces what the journal holds): a resend may duplicate them`,
  };
}

/** The figures /metrics reads when scraped, so that the hot path never touches their gauges. */
export function exportFigures(
  metrics: WorkerMetrics,
  producer: { readonly queuedPoints: number; readonly queuedBytes: number },
  ledger: Ledger,
  replayed: () => ReplayCounts,
): void {
  const { journal } = ledger;
  metrics.scrapeQueue(() => ({ points: producer.queuedPoints, bytes: producer.queuedBytes }));
  metrics.scrapeJournal(() => ({
    bytes: journal.bytes,
    records: journal.records,
    oldestMs: ledger.oldestTimestamp,
    damaged: journal.damagedRecords,
    ...replayed(),
  }));
}
