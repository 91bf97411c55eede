// librdkafka's delivery reports, and what becomes of a point that failed after its 202.
//
// ACK_MODE=async asks for reports of failures only (producer.ts says why); each carries the message
// (dr_msg_cb), which goes to the spill journal to be replayed: a 202 is never silently lost.
// ACK_MODE=delivered asks for a report per message; each carries its request's DeliveryTicket
// (opaque), and the request is answered when the last of its points reported.
import Kafka from 'node-rdkafka';
import { Throttled, type Logger } from '../log.js';
import type { WorkerMetrics } from '../metrics.js';
import type { SpillJournal } from './spill-journal.js';

/**
 * ACK_MODE=delivered: one per request. The reports count its points down and call settle() once,
 * when the last one reported; `failed` says how many were not acknowledged.
 */
export interface DeliveryTicket {
  remaining: number;
  failed: number;
  /** librdkafka's message for the first failure, e.g. "Local: Message timed out". */
  firstError: string;
  /** performance.now() when its points were handed to librdkafka (set by tryEnqueue). */
  enqueuedAt: number;
  settle(ticket: DeliveryTicket): void;
}

export class DeliveryReports {
  /** Accepted points whose delivery failed (timed out, fatal error): each was reported and logged. */
  failed = 0;
  /** Of those, the points kept in the spill journal, and those it could not take. */
  spilled = 0;
  lost = 0;
  private readonly failures: Throttled;

  constructor(
    private readonly journal: SpillJournal,
    private readonly metrics: WorkerMetrics,
    private readonly log: Logger,
  ) {
    this.failures = new Throttled(log, 'error', 'kafka delivery failed for accepted points');
  }

  /** async mode: only failures arrive here (every message with DELIVERY_LATENCY_HISTOGRAM=1). delivered mode: every message, with its ticket. */
  onReport(err: Kafka.LibrdKafkaError | null, report: Kafka.DeliveryReport): void {
    const ticket = report.opaque as DeliveryTicket | undefined;
    if (err) {
      const code = codeName(err.code);
      this.failed++;
      this.metrics.deliveryErrors.labels(code).inc();
      if (ticket !== undefined) {
        // The client hears 500 and resends: not spilled, or it would arrive twice.
        // node-rdkafka's delivery errors carry librdkafka's message but not always its code.
        if (ticket.failed++ === 0) ticket.firstError = err.message;
        this.failures.report({ code, message: err.message, partition: report.partition, answered: 500 });
      } else {
        this.failures.report({ code, message: err.message, partition: report.partition, spilled: this.spill(report) });
      }
    }
    if (ticket === undefined) {
      // ACK_MODE=async with DELIVERY_LATENCY_HISTOGRAM=1: the message's timestamp is its enqueue time (ms).
      if (!err && report.timestamp !== undefined) this.metrics.deliveryLatency.observe(Math.max(0, Date.now() - report.timestamp) / 1000);
      return;
    }
    if (!err) this.metrics.deliveryLatency.observe((performance.now() - ticket.enqueuedAt) / 1000);
    if (--ticket.remaining === 0) ticket.settle(ticket);
  }

  /** The journal lost a batch it could not write (the disk refused). */
  journalWriteFailed(records: number): void {
    this.spilled -= records;
    this.lost += records;
    this.metrics.pointsLost.labels('spill_write_error').inc(records);
  }

  /** Logs what the throttle still holds (at shutdown). */
  flushLog(): void {
    this.failures.flush();
  }

  /** Keeps a point that failed after its 202 in the journal; false when it could not. */
  private spill(report: Kafka.DeliveryReport): boolean {
    const key = typeof report.key === 'string' ? Buffer.from(report.key) : report.key;
    const value = report.value;
    if (key != null && value != null) {
      try {
        if (this.journal.append(key, value, report.timestamp ?? Date.now())) {
          this.spilled++;
          this.metrics.spilled.inc();
          return true;
        }
      } catch (err) {
        this.log.error({ err }, 'spill journal write failed');
      }
    }
    this.lost++;
    this.metrics.pointsLost.labels(this.journal.writeFailure !== null ? 'spill_write_error' : 'spill_full').inc();
    return false;
  }
}

const CODE_NAMES = new Map<number, string>(Object.entries(Kafka.CODES.ERRORS).map(([name, code]) => [code, name]));
export function codeName(code: number): string {
  return CODE_NAMES.get(code) ?? `CODE_${code}`;
}
