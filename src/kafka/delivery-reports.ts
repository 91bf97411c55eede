// librdkafka's delivery reports, and what becomes of a point that failed after its 202.
//
// ACK_MODE=async asks for reports of failures only (producer.ts says why); each carries the message
// (dr_msg_cb) and its journal record's tag, and is produced again after a back-off (write-ahead/replay.ts):
// the record stays in the journal meanwhile. ACK_MODE=delivered asks for a report per message; each
// carries its request's DeliveryTicket (opaque), and the request is answered when the last of its
// points reported.
import Kafka from '@confluentinc/kafka-javascript';
import { Throttled, type Logger } from '../log.js';
import type { WorkerMetrics } from '../metrics/metrics.js';

/** One failed message, from its failure report (the report carries its key and value). */
export interface FailedMessage {
  /** Its journal record's id: the tag it was produced with. */
  id: number;
  key: Buffer;
  value: Buffer;
  /** librdkafka said the broker may have it (sent, no answer): producing it again may duplicate it. */
  possiblyWritten: boolean;
}

/**
 * ACK_MODE=delivered: one per request. The reports count its points down and call settle() once,
 * when the last one reported, or when the deadline passed first (TicketDeadlines); `failed` says how
 * many were not acknowledged, `uncertain` how many of those may have been written all the same.
 */
export interface DeliveryTicket {
  remaining: number;
  failed: number;
  /**
   * Failed points that librdkafka reports as possibly persisted (sent, no answer: a broker that fell
   * silent), and points without any report when the deadline passed.
   */
  uncertain: number;
  /** librdkafka's message for the first failure, e.g. "Local: Message timed out". */
  firstError: string;
  /** performance.now() when its points were handed to librdkafka (set by tryEnqueue). */
  enqueuedAt: number;
  /** Answered: reports arriving after this (past the deadline) change nothing. */
  settled: boolean;
  settle(ticket: DeliveryTicket): void;
}

/** A new ticket that calls settle once, with nothing counted yet. */
export function newTicket(settle: (ticket: DeliveryTicket) => void): DeliveryTicket {
  return { remaining: 0, failed: 0, uncertain: 0, firstError: '', enqueuedAt: 0, settled: false, settle };
}

/** librdkafka's rd_kafka_msg_status_t, as the patched binding puts it in each report (`status`). */
export const MSG_STATUS = { NOT_PERSISTED: 0, POSSIBLY_PERSISTED: 1, PERSISTED: 2 } as const;

function settleOnce(ticket: DeliveryTicket): void {
  if (ticket.settled) return;
  ticket.settled = true;
  ticket.settle(ticket);
}

/**
 * ACK_MODE=delivered: answers every request within DELIVERY_TIMEOUT_MS plus a margin, whatever the
 * broker does. librdkafka fails a message that is not acknowledged within message.timeout.ms (set to
 * DELIVERY_TIMEOUT_MS) itself, but it looks for such messages once a second, so its report comes up to
 * about a second late; this guard answers a request whose reports have not all come by
 * DELIVERY_TIMEOUT_MS + DEADLINE_MARGIN_MS, counting the missing ones as uncertain. Tickets are kept
 * in the order they were handed over, and all share one timeout, so only the oldest need looking at.
 */
export class TicketDeadlines {
  private readonly tickets: DeliveryTicket[] = [];
  private head = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly timeoutMs: number,
    private readonly marginMs = DEADLINE_MARGIN_MS,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** A ticket whose points were just handed to librdkafka (its enqueuedAt set). */
  watch(ticket: DeliveryTicket): void {
    this.tickets.push(ticket);
    this.timer ??= setInterval(() => this.sweep(), DEADLINE_SWEEP_MS).unref();
  }

  /** Settles every ticket past its deadline; forgets those settled. */
  sweep(): void {
    const limit = this.now() - this.timeoutMs - this.marginMs;
    const tickets = this.tickets;
    let head = this.head;
    for (; head < tickets.length; head++) {
      const ticket = tickets[head]!;
      if (ticket.settled) continue;
      if (ticket.enqueuedAt > limit) break;
      // No report came for these points in time: Kafka may have them, or may still get them.
      ticket.failed += ticket.remaining;
      ticket.uncertain += ticket.remaining;
      if (ticket.firstError === '') ticket.firstError = `no delivery report within DELIVERY_TIMEOUT_MS + ${this.marginMs} ms`;
      settleOnce(ticket);
    }
    if (head === tickets.length) {
      tickets.length = 0;
      head = 0;
      if (this.timer !== null) clearInterval(this.timer);
      this.timer = null;
    } else if (head > 1024) {
      tickets.splice(0, head);
      head = 0;
    }
    this.head = head;
  }

  /** Tickets watched and not yet forgotten (settled ones are forgotten by the next sweep). */
  get size(): number {
    return this.tickets.length - this.head;
  }
}

/** How late after DELIVERY_TIMEOUT_MS a request is answered at the latest (see TicketDeadlines). */
export const DEADLINE_MARGIN_MS = 2_000;
const DEADLINE_SWEEP_MS = 100;

export class DeliveryReports {
  private readonly failures: Throttled;

  constructor(
    private readonly metrics: WorkerMetrics,
    log: Logger,
    /** ACK_MODE=async: a message of a journal record failed; it is produced again (write-ahead/replay.ts). */
    private readonly onFailed: (message: FailedMessage) => void,
  ) {
    this.failures = new Throttled(log, 'error', 'kafka delivery failed for accepted points');
  }

  /**
   * ACK_MODE=async: failures only (every message has its record's tag; librdkafka counts the
   * acknowledgements). ACK_MODE=delivered: every message, with its request's ticket.
   */
  onReport(err: Kafka.LibrdKafkaError | null, report: Kafka.DeliveryReport): void {
    const ticket = report.opaque as DeliveryTicket | undefined;
    if (err) {
      const code = codeName(err.code);
      this.metrics.deliveryErrors.labels(code).inc();
      if (ticket !== undefined) {
        // The client hears 500: not produced again, or a resend would make it arrive twice.
        // The binding's delivery errors carry librdkafka's message but not always its code.
        if (ticket.failed++ === 0) ticket.firstError = answeredReason(err.message);
        if (report.status !== MSG_STATUS.NOT_PERSISTED) ticket.uncertain++;
        this.failures.report({ code, message: err.message, partition: report.partition, status: report.status, answered: 500 });
      } else if (report.tag !== undefined && report.value != null && report.key != null) {
        const key = typeof report.key === 'string' ? Buffer.from(report.key) : report.key;
        this.onFailed({ id: report.tag, key, value: report.value, possiblyWritten: report.status !== MSG_STATUS.NOT_PERSISTED });
        this.failures.report({
          code,
          message: err.message,
          partition: report.partition,
          status: report.status,
          kept: 'in the journal, produced again after a back-off',
        });
      } else {
        // Every message of ACK_MODE=async has its record's tag and its payload (dr_msg_cb).
        this.failures.report({ code, message: err.message, partition: report.partition, kept: 'no: a report without its record' });
      }
    }
    if (ticket === undefined) return;
    if (!err) this.metrics.deliveryLatency.observe((performance.now() - ticket.enqueuedAt) / 1000);
    if (--ticket.remaining === 0) settleOnce(ticket);
  }

  /** Logs what the throttle still holds (at shutdown). */
  flushLog(): void {
    this.failures.flush();
  }
}

/**
 * The reason a 500 names, as clients have always read it: a broker's refusal by its description alone,
 * lowercased ("message size too large"), as node-rdkafka passed it; this client passes librdkafka's
 * own text ("Broker: Message size too large"). Local errors keep theirs ("Local: Message timed out").
 */
function answeredReason(message: string): string {
  return message.startsWith('Broker: ') ? message.slice('Broker: '.length).toLowerCase() : message;
}

const CODE_NAMES = new Map<number, string>(Object.entries(Kafka.CODES.ERRORS).map(([name, code]) => [code, name]));
export function codeName(code: number): string {
  return CODE_NAMES.get(code) ?? `CODE_${code}`;
}
