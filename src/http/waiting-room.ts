// Requests that find the producer queue full wait here for room, oldest first, at most
// QUEUE_FULL_WAIT_MS, instead of being answered 500 at once.
//
// Why: a worker faster than its broker (librdkafka's queue, read exactly by admission, stays at
// PRODUCER_QUEUE_MAX_POINTS) finds room only as Kafka acknowledges batches. Refused at once, a client
// that retries at once (a load generator's closed loop, a device without backoff) comes back within
// microseconds and is refused again: under wrk at 100 points per request a worker answered
// 40,000-48,000 refusals a second, CPU the broker beside it did not get.
// Waiting, the same client is answered 202 when room appears, a few milliseconds later: the answer is
// delayed, not refused, as an input of Fluent Bit pauses while its output's buffer is full. A request
// still without room after QUEUE_FULL_WAIT_MS gets the 500 (Retry-After: 1) it gets today; with
// QUEUE_FULL_WAIT_MS=0 every one gets it at once. Only a full queue waits: a broker down, a fatal
// error or shutdown refuse at once, and end every wait.
//
// Bodies waiting are copies (uWS reuses its buffers), at most QUEUE_FULL_WAIT_MAX_BYTES of them.
import type { ProducerRefusal } from '../api/errors.js';

/** How often the queue is looked at while requests wait (Kafka acknowledges a batch every few ms). */
const POLL_MS = 5;

export interface Waiter {
  /** When the request arrived (performance.now()): its wait counts from there. */
  readonly since: number;
  readonly bytes: number;
  /** Called once: null when the request may go on now, else why it is refused. */
  release(refusal: ProducerRefusal | null): void;
}

export class WaitingRoom {
  private readonly waiters: Waiter[] = [];
  private bytes = 0;
  private timer: NodeJS.Timeout | null = null;
  /** Inside poll(): a request let go that still did not fit enters again, behind the others, for the next poll. */
  private polling = false;

  constructor(
    /** The producer's admission: why nothing could be taken now, or null. */
    private readonly admission: () => ProducerRefusal | null,
    private readonly waitMs: number,
    private readonly maxBytes: number,
  ) {}

  /** Requests waiting now. */
  get size(): number {
    return this.waiters.length;
  }

  /**
   * Whether a request that admission refused for `refusal` waits instead (its body is read first).
   * With others waiting, a request that admission would take waits too, behind them.
   */
  mayWait(refusal: ProducerRefusal | null): boolean {
    if (refusal === null) return this.waiters.length > 0;
    return refusal === 'queue_full' && this.waitMs > 0 && this.bytes < this.maxBytes;
  }

  /** Takes a request whose body has been read; false (and nothing kept) when its body does not fit. */
  enter(waiter: Waiter): boolean {
    if (this.bytes + waiter.bytes > this.maxBytes) return false;
    this.waiters.push(waiter);
    this.bytes += waiter.bytes;
    this.timer ??= setInterval(() => this.poll(), POLL_MS);
    if (!this.polling) this.poll();
    return true;
  }

  /**
   * Lets the oldest requests go on while admission allows: each one's points are enqueued before
   * the next is looked at, so the queue's limit holds. Those waiting longer than waitMs are refused
   * queue_full; every other refusal ends every wait.
   */
  private poll(): void {
    const now = performance.now();
    let released = 0;
    // Only those waiting when the poll began: one let go that still did not fit enters again, behind
    // them, and waits for the next poll (admission and the queue could disagree on a request's size).
    const waiting = this.waiters.length;
    this.polling = true;
    try {
      while (released < waiting) {
        const refusal = this.admission();
        const waiter = this.waiters[released] as Waiter;
        if (refusal === 'queue_full' && now - waiter.since < this.waitMs) break;
        released++;
        this.bytes -= waiter.bytes;
        waiter.release(refusal);
      }
    } finally {
      this.polling = false;
      if (released > 0) this.waiters.splice(0, released);
    }
    if (this.waiters.length === 0 && this.timer !== null) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }
}
