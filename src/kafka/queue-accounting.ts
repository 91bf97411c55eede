// How many points (and bytes) this worker has handed to librdkafka that Kafka has neither acknowledged
// nor failed: what the producer queue limits (PRODUCER_QUEUE_MAX_POINTS / _BYTES) are checked against.
//
// The count comes from librdkafka itself, not from a delivery report per message: node-rdkafka hands
// JavaScript at most 100 delivery reports per event-loop turn (callbacks.cc,
// DeliveryReportDispatcher::Flush), each a new object and an event, so under load acknowledgements
// fell behind and the queue looked full while Kafka already had the messages (measured: ~45k
// points/s per worker, most requests answered 500). With delivery.report.only.error=true only
// failures come back as reports; the depth of the queue is librdkafka's own `msg_cnt`/`msg_size`
// (statistics every 100 ms) plus what was enqueued since those statistics were read.
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
  /** Points that had left the queue (acknowledged or failed) as of the latest statistics. */
  private leftAtStats = 0;
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

  /** Points handed to librdkafka just now. */
  added(points: number, bytes: number): void {
    this.enqueued += points;
    this.enqueuedBytes += bytes;
  }

  /**
   * librdkafka's statistics: its queue depth as of now, and `failed`, the points reported failed so
   * far. Returns how many points Kafka acknowledged since the previous statistics.
   */
  onStatistics(queued: number, queuedBytes: number, failed: number): number {
    const left = this.enqueued - queued;
    if (left > this.leftAtStats || queued === 0) this.refusedUntilPointsLeave = false;
    this.leftAtStats = left;
    this.statsQueue = queued;
    this.statsQueueBytes = queuedBytes;
    this.enqueuedAtStats = this.enqueued;
    this.enqueuedBytesAtStats = this.enqueuedBytes;
    // Acknowledged = enqueued - still queued - failed, as of these statistics.
    const delivered = this.enqueued - queued - failed;
    if (delivered <= this.deliveredReported) return 0;
    const since = delivered - this.deliveredReported;
    this.deliveredReported = delivered;
    return since;
  }
}
