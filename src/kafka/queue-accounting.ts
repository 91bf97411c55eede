// How many points (and bytes) this worker has handed to librdkafka that Kafka has neither acknowledged
// nor failed: what the producer queue limits (PRODUCER_QUEUE_MAX_POINTS / _BYTES) are checked against.
//
// The count comes from librdkafka itself, not from a delivery report per message: node-rdkafka hands
// JavaScript at most 100 delivery reports per event-loop turn (callbacks.cc,
// DeliveryReportDispatcher::Flush), each a new object and an event, so under load acknowledgements
// fell behind and the queue looked full while Kafka already had the messages (measured: ~45k
// points/s per worker, most requests answered 500). With delivery.report.only.error=true only
// failures come back as reports; the depth of the queue is librdkafka's own `msg_cnt`/`msg_size`
// (statistics every 100 ms) plus what was enqueued since librdkafka took those statistics.
//
// "Since librdkafka took them", not "since JavaScript read them": a statistics event reaches
// JavaScript 2-18 ms after librdkafka counted its queue (measured: the poll interval, then the event
// loop), and what was enqueued meanwhile is in neither number. Counted from the time JavaScript read
// them, those points dropped out of the queue's depth until the next statistics, and admission, which
// keeps room in the spill journal for every queued point, took more than the journal could hold
// should all of them fail (CI: 16 points lost as spill_full). So each statistics event is matched,
// by librdkafka's own clock (statistics.ts, statisticsTakenAt), with what had been enqueued by then.

/**
 * Enqueues this close together share one entry of the history: ~100 entries per statistics interval
 * whatever the request rate. An entry counts as taken by librdkafka's statistics only if its last
 * enqueue was before them, so merging only ever counts points as queued a little longer.
 */
const HISTORY_BUCKET_MS = 1;
/**
 * librdkafka counts its queue just before it reads the clock for `ts` (rd_kafka_stats_emit_all, a
 * lock apart): what was enqueued within this margin before `ts` counts as not in the statistics yet.
 * Counting a point twice until the next statistics is the safe error; missing one is not.
 */
const STATS_CLOCK_MARGIN_MS = 2;
/**
 * A statistics time further back than this, or ahead of now, is not trusted (a platform whose
 * rd_clock() is not CLOCK_MONOTONIC, an event loop stalled for a second): it is moved into that
 * window, so that the history is always consumed and the count can never stay high for good.
 */
const STATS_MAX_LAG_MS = 1000;

/** Enqueues from `startedAt` to `at` (performance.now()), and the running totals after the last. */
interface HistoryEntry {
  startedAt: number;
  at: number;
  points: number;
  bytes: number;
}

export class QueueAccounting {
  /** Messages and bytes enqueued since the process started (bytes: keys and values). */
  private enqueued = 0;
  private enqueuedBytes = 0;
  /** From the latest statistics: librdkafka's queue depth, and our counters when they were read. */
  private statsQueue = 0;
  private statsQueueBytes = 0;
  private enqueuedAtStats = 0;
  private enqueuedBytesAtStats = 0;
  private deliveredReported = 0;
  /** What had been enqueued by when, for the statistics to come. Entries before `head` are spent. */
  private readonly history: HistoryEntry[] = [];
  private head = 0;
  /**
   * A request did not fit (refused): nothing fits until statistics show points leaving the queue, the
   * only way its depth goes down. Without it, a queue a few points below its mark (nearly always: a
   * request rarely fills it to the point) passed admission, and every request until then was parsed,
   * validated and encoded only to be refused: under wrk's closed loop at 100 points per request most
   * refusals were of that kind (bench/HISTORY.md). Statistics that show the same depth keep it: a
   * queue Kafka has not drained by a single point has no more room than at the refusal.
   */
  private refusedUntilPointsLeave = false;

  /** Points accepted and not yet acknowledged by Kafka or failed (librdkafka's count, kept current). */
  get points(): number {
    return this.statsQueue + (this.enqueued - this.enqueuedAtStats);
  }

  get bytes(): number {
    return this.statsQueueBytes + (this.enqueuedBytes - this.enqueuedBytesAtStats);
  }

  /** Whether a request was refused for lack of room and no point has left the queue since. */
  get full(): boolean {
    return this.refusedUntilPointsLeave;
  }

  /** A request did not fit below the limits: the queue counts as full until points leave it. */
  refused(): void {
    this.refusedUntilPointsLeave = true;
  }

  /** Points handed to librdkafka just now (`at`: performance.now() after the handing over). */
  added(points: number, bytes: number, at: number = performance.now()): void {
    this.enqueued += points;
    this.enqueuedBytes += bytes;
    const last = this.history.length > this.head ? this.history[this.history.length - 1]! : null;
    if (last !== null && at - last.startedAt < HISTORY_BUCKET_MS) {
      last.at = at;
      last.points = this.enqueued;
      last.bytes = this.enqueuedBytes;
    } else {
      this.history.push({ startedAt: at, at, points: this.enqueued, bytes: this.enqueuedBytes });
    }
  }

  /** Moves the totals "as of the statistics" to what had been enqueued before `takenAt`. */
  private enqueuedBy(takenAt: number): void {
    const cutoff = takenAt - STATS_CLOCK_MARGIN_MS;
    const history = this.history;
    let head = this.head;
    for (; head < history.length && history[head]!.at <= cutoff; head++) {
      this.enqueuedAtStats = history[head]!.points;
      this.enqueuedBytesAtStats = history[head]!.bytes;
    }
    if (head === history.length) {
      history.length = 0;
      head = 0;
    } else if (head > 1024) {
      history.splice(0, head);
      head = 0;
    }
    this.head = head;
  }

  /**
   * librdkafka's statistics: its queue depth when it took them (`takenAt`, on performance.now()'s
   * scale: statisticsTakenAt), and `failed`, the points reported failed so far. Returns how many
   * points Kafka acknowledged since the previous statistics. `readAt`: when JavaScript read them.
   */
  onStatistics(queued: number, queuedBytes: number, failed: number, takenAt: number, readAt: number = performance.now()): number {
    // Points that had left the queue (acknowledged or failed) as of the previous statistics.
    const leftBefore = this.enqueuedAtStats - this.statsQueue;
    this.enqueuedBy(Number.isFinite(takenAt) ? Math.min(readAt, Math.max(readAt - STATS_MAX_LAG_MS, takenAt)) : readAt);
    this.statsQueue = queued;
    this.statsQueueBytes = queuedBytes;
    if (this.enqueuedAtStats - queued > leftBefore || this.points === 0) this.refusedUntilPointsLeave = false;
    // Acknowledged = enqueued - still queued - failed, as of these statistics.
    const delivered = this.enqueuedAtStats - queued - failed;
    if (delivered <= this.deliveredReported) return 0;
    const since = delivered - this.deliveredReported;
    this.deliveredReported = delivered;
    return since;
  }
}
