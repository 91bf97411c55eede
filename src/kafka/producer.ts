// One node-rdkafka producer per worker process, created by the worker itself: each worker is its own
// librdkafka client (cluster.fork() starts a new process). librdkafka does the batching: linger.ms=10,
// batch.num.messages=100, as the README's "The Kafka messages" states.
//
// What this module promises the HTTP edge:
//   - tryEnqueue() takes all points of a request or none (see the comment on it);
//   - it refuses while the producer cannot deliver: not yet connected, a fatal error, the topic
//     unknown, no broker reachable for longer than BROKER_DOWN_GRACE_MS, brokers that leave
//     requests unanswered that long (broker-silence.ts), or the queue above its high-water mark
//     (PRODUCER_QUEUE_MAX_POINTS / PRODUCER_QUEUE_MAX_BYTES);
//   - every accepted message is accounted for until Kafka acknowledges it or it fails.
//
// The queue's depth comes from librdkafka's statistics, not from a delivery report per message
// (queue-accounting.ts says why).
//
// A failure report carries the message, and in ACK_MODE=async the point goes to the spill journal
// (delivery-reports.ts), to be replayed (spill-replay.ts): a 202 is never silently lost. Admission
// keeps room for that: a request is refused once the journal could not take the whole producer queue
// as well. ACK_MODE=delivered is the exception to "reports only for failures": every message reports
// back to its request's ticket. Capped by node-rdkafka's report rate above, it is the slower,
// end-to-end mode.
//
// The other jobs live beside this file: settings.ts (the librdkafka properties), broker-link.ts
// (connecting, the topic's metadata every second), broker-state.ts (what is known about Kafka and what
// follows for admission and readiness), broker-silence.ts (a broker that stops answering),
// queue-accounting.ts (points handed over and not yet acknowledged), statistics.ts (librdkafka's
// statistics to Prometheus), delivery-reports.ts (reports, tickets, spilling).
import Kafka from 'node-rdkafka';
import type { Config } from '../config.js';
import type { ProducerRefusal } from '../errors.js';
import { Throttled, type Logger } from '../log.js';
import type { WorkerMetrics } from '../metrics.js';
import type { EncodedPoints } from '../track-point/encode.js';
import { BrokerLink, POLL_INTERVAL_MS } from './broker-link.js';
import { BrokerState, silenceReason } from './broker-state.js';
import { codeName, DeliveryReports, TicketDeadlines, type DeliveryTicket } from './delivery-reports.js';
import { QueueAccounting } from './queue-accounting.js';
import { messageMaxBytes, type ProducerSettings } from './settings.js';
import type { SpillJournal } from './spill-journal.js';
import { SPILL_RECORD_OVERHEAD_BYTES, spillReserveBytes } from '../spill-record.js';
import { realBrokers, statisticsTakenAt, StatisticsExporter, topicLeaders, type Statistics } from './statistics.js';

/**
 * Why tryEnqueue or admission refused: a code of the error catalogue (the broker state's, the queue's,
 * the journal's), or a point too large for a Kafka message (413).
 */
export type Refusal = ProducerRefusal | 'message_too_large';

/** syslog levels, as librdkafka's log events use them. */
const LOG_ERR = 3;
const LOG_WARNING = 4;
const LOG_INFO = 6;

export class TrackProducer {
  private readonly producer: Kafka.Producer;
  private readonly topic: string;
  private readonly maxPoints: number;
  private readonly maxBytes: number;
  private readonly messageMaxBytes: number;
  private readonly spillReserve: number;
  private readonly spillMustKeep: boolean;
  private readonly state: BrokerState;
  private readonly reports: DeliveryReports;
  /** ACK_MODE=delivered: every request answered within DELIVERY_TIMEOUT_MS plus a margin. */
  private readonly deadlines: TicketDeadlines;
  private readonly statistics: StatisticsExporter;
  private readonly link: BrokerLink;

  /** The answer tryEnqueue gives before looking at the queue; recomputed on every state change. */
  private refusal: ProducerRefusal | null = 'broker_unavailable';
  private readonly queue = new QueueAccounting();
  /** Called once on a fatal producer error: the worker ends so that a fresh one replaces it. */
  onFatal: (() => void) | null = null;
  private readonly brokerErrors: Throttled;
  private readonly clientErrors: Throttled;
  private readonly clientWarnings: Throttled;
  private readonly acceptingWaiters = new Set<() => void>();

  constructor(
    config: Config,
    private readonly log: Logger,
    private readonly metrics: WorkerMetrics,
    private readonly journal: SpillJournal,
    readonly settings: ProducerSettings,
  ) {
    this.topic = config.topic;
    this.maxPoints = config.queueMaxPoints;
    this.maxBytes = config.queueMaxBytes;
    this.spillReserve = spillReserveBytes(config);
    // In delivered mode a failed point is answered 500, not spilled: the journal only holds the past.
    this.spillMustKeep = config.ackMode === 'async';
    this.messageMaxBytes = messageMaxBytes(settings);
    this.state = new BrokerState({ brokers: config.brokers, topic: config.topic, graceMs: config.brokerDownGraceMs });
    this.reports = new DeliveryReports(journal, metrics, log);
    this.deadlines = new TicketDeadlines(config.deliveryTimeoutMs);
    this.statistics = new StatisticsExporter(metrics, config.topic);
    // Throws on an unknown or invalid property: the worker reports it as a configuration error.
    this.producer = new Kafka.Producer(settings.global, settings.topic);
    if (typeof this.producer.produceBatch !== 'function') {
      throw new Error('node-rdkafka lacks produceBatch: patches/ was not applied; run scripts/patch-node-rdkafka.sh (npm ci runs it)');
    }
    this.link = new BrokerLink(this.producer, this.state, { brokers: config.brokers, topic: config.topic, log, changed: () => this.updateRefusal() });
    this.brokerErrors = new Throttled(log, 'warn', 'kafka client error');
    // node-rdkafka's error events carry only the code's name ("ssl error"); librdkafka says why in its
    // log ("SSL handshake failed: ... certificate verify failed"), passed on here at its level.
    this.clientErrors = new Throttled(log, 'error', 'librdkafka');
    this.clientWarnings = new Throttled(log, 'warn', 'librdkafka');
    metrics.setQueueSource(() => ({ points: this.queuedPoints, bytes: this.queuedBytes }));
    this.producer.on('delivery-report', (err, report) => this.reports.onReport(err, report));
    this.producer.on('event.error', (err) => this.onError(err));
    this.producer.on('event.stats', (event: { message: string }) => this.onStats(JSON.parse(event.message) as Statistics));
    this.producer.on('event.log', (event: { severity: number; fac: string; message: string }) => this.onClientLog(event));
  }

  /** Connects in the background and keeps retrying; until then tryEnqueue refuses with 'broker_unavailable'. */
  start(): void {
    this.link.connect();
  }

  /** Points accepted and not yet acknowledged by Kafka or failed (librdkafka's count, kept current). */
  get queuedPoints(): number {
    return this.queue.points;
  }

  /** Accepted points whose delivery failed, those spilled, those lost (delivery-reports.ts). */
  get failedPoints(): number {
    return this.reports.failed;
  }

  get spilledPoints(): number {
    return this.reports.spilled;
  }

  get lostPoints(): number {
    return this.reports.lost;
  }

  get queuedBytes(): number {
    return this.queue.bytes;
  }

  /** Resolves true once points are accepted, or false after timeoutMs. */
  whenAccepting(timeoutMs: number): Promise<boolean> {
    if (this.refusal === null) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.acceptingWaiters.delete(done);
        resolve(false);
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        resolve(true);
      };
      this.acceptingWaiters.add(done);
    });
  }

  /** Whether Kafka takes points right now (what a journal replay waits for; the journal's own state aside). */
  kafkaAvailable(): boolean {
    return this.state.kafkaAvailable();
  }

  /** /readyz: what Kafka allows (broker-state.ts), then whether the journal can keep what fails. */
  readiness(): { ready: boolean; reason: string } {
    const unready = this.state.unreadyReason();
    if (unready !== null) return { ready: false, reason: unready };
    if (this.journal.writeFailure !== null) return { ready: false, reason: this.journal.writeFailure.message };
    if (this.spillMustKeep && this.journal.bytes + this.spillReserve > this.journal.capacity) {
      return { ready: false, reason: `spill journal full: ${this.journal.bytes} of ${this.journal.capacity} bytes (SPILL_MAX_BYTES) hold points waiting for Kafka` };
    }
    return { ready: true, reason: 'ok' };
  }

  /**
   * Why a request would be refused right now, asked before its body is parsed: under overload the
   * service spends nothing on points it cannot take (measured before this check: 82 % of a saturated
   * worker's requests were parsed, validated and encoded, then refused). No side effect: the waiting
   * room (http/waiting-room.ts) asks it every few milliseconds.
   */
  admission(): ProducerRefusal | null {
    if (this.refusal !== null) return this.refusal;
    if (this.queue.full || this.queuedPoints >= this.maxPoints || this.queuedBytes >= this.maxBytes) return 'queue_full';
    if (this.spillMustKeep && !this.spillHasRoomFor(0, 0)) return 'journal_full';
    return null;
  }

  /**
   * Whether the journal could still take every queued point plus these, should all of them fail:
   * a 202 is only given to points that are sure to end up in Kafka or in the journal.
   */
  private spillHasRoomFor(points: number, bytes: number): boolean {
    const journal = this.journal;
    if (journal.writeFailure !== null) return false;
    const atRisk = this.queuedBytes + bytes + SPILL_RECORD_OVERHEAD_BYTES * (this.queuedPoints + points);
    return journal.bytes + atRisk <= journal.capacity;
  }

  /**
   * Enqueues every point of one request, or none of them; returns null when taken, else why not.
   *
   * One native call for the whole request (produceBatch, added to node-rdkafka by patches/): its
   * topic handle is kept from call to call and no JavaScript value is converted per point (README,
   * "One native call per request").
   *
   * All or nothing holds because every condition under which librdkafka refuses a message
   * synchronously is checked before the call:
   *   ERR__QUEUE_FULL        our high-water mark is far below librdkafka's queue limits
   *                          (producerSettings), so admitted points fit;
   *   ERR_MSG_SIZE_TOO_LARGE the largest value is compared with message.max.bytes;
   *   ERR__FATAL / ERR__STATE / unknown topic  are states we track from events (`refusal`).
   * What remains is a fatal error raised by librdkafka's thread during this very call: then the
   * messages already queued fail with ERR__FATAL too and are not written. Should librdkafka still
   * refuse a message, produceBatch says how many of the request's it queued: the request is
   * answered 500, the points queued are delivered, and a client retry duplicates them: never a
   * loss. Both cases are logged and counted as delivery errors.
   */
  tryEnqueue(batch: EncodedPoints, ticket: DeliveryTicket | null = null): Refusal | null {
    if (this.refusal !== null) return this.refusal;
    const count = batch.count;
    if (this.queuedPoints + count > this.maxPoints || this.queuedBytes + batch.bytes > this.maxBytes) {
      this.queue.refused();
      return 'queue_full';
    }
    if (batch.largestValue > this.messageMaxBytes) return 'message_too_large';
    if (this.spillMustKeep && !this.spillHasRoomFor(count, batch.bytes)) return 'journal_full';

    // produceBatch stamps every message with the time of this call, the time of acceptance, not the
    // device clock (README, "The Kafka messages"): a device clock hours ahead would make the broker
    // reject the whole batch.
    try {
      if (ticket === null) {
        this.producer.produceBatch(this.topic, batch.data, batch.messages);
      } else {
        ticket.remaining = count;
        ticket.enqueuedAt = performance.now();
        this.producer.produceBatch(this.topic, batch.data, batch.messages, ticket);
        this.deadlines.watch(ticket);
      }
    } catch (err) {
      // Only the points already queued will report: the request is answered 500 now, not by settle().
      const enqueued = enqueuedBefore(err);
      if (ticket !== null) ticket.remaining = enqueued;
      this.queue.added(enqueued, enqueued === 0 ? 0 : batch.bytes); // an over-count only makes the limit stricter
      if (enqueued > 0) {
        this.metrics.deliveryErrors.labels('PARTIAL_ENQUEUE').inc(enqueued);
        this.log.error({ err, enqueued, count }, 'produce failed midway: the points already queued will be delivered; the client gets 500 and may resend them (duplicates, never a loss)');
      } else {
        this.brokerErrors.report({ err });
      }
      return 'producer_failed';
    }
    this.queue.added(count, batch.bytes);
    return null;
  }

  /**
   * Stops taking points and waits until every queued point is acknowledged or has failed, at most
   * timeoutMs. Returns how many were still outstanding (0 when everything was delivered).
   */
  async drain(timeoutMs: number): Promise<number> {
    this.state.onStopping();
    this.updateRefusal();
    this.link.stop();
    const deadline = Date.now() + timeoutMs;
    // librdkafka's flush succeeds once its queue is empty: every message acknowledged or failed.
    // Until a flush has said so, count at least one point as outstanding (our count may lag by 100 ms).
    let left = this.link.connected ? Math.max(1, this.queuedPoints) : this.queuedPoints;
    while (left !== 0 && this.link.connected && Date.now() < deadline) {
      const timedOut = await new Promise<boolean>((resolve) => {
        this.producer.flush(Math.max(1, Math.min(500, deadline - Date.now())), (err) => resolve(Boolean(err)));
      });
      left = timedOut ? Math.max(1, this.queuedPoints) : 0;
    }
    // Failure reports of the last messages reach JavaScript through the poll loop; give it a turn.
    // What failed is then in the journal's write buffer: the worker closes the journal after this.
    await new Promise((r) => setTimeout(r, POLL_INTERVAL_MS * 2));
    this.reports.flushLog();
    await this.link.disconnect(deadline - Date.now());
    return left;
  }

  /** The journal lost a batch it could not write (the disk refused). */
  journalWriteFailed(records: number): void {
    this.reports.journalWriteFailed(records);
    this.updateRefusal();
  }

  // ---- events from node-rdkafka -----------------------------------------------------------------

  private onError(err: Kafka.LibrdKafkaError): void {
    if (err.isFatal) {
      this.state.onFatalError();
      this.log.fatal({ err }, 'fatal kafka producer error: this worker stops taking points and is replaced (ACK_MODE=async: what failed is spilled)');
      this.updateRefusal();
      this.onFatal?.();
      return;
    }
    if (err.code === Kafka.CODES.ERRORS.ERR__ALL_BROKERS_DOWN) {
      this.state.onAllBrokersDown();
      this.link.followBrokerReachability();
    }
    this.brokerErrors.report({ code: codeName(err.code), message: err.message });
  }

  /**
   * librdkafka's log, at its own level. Errors and warnings that repeat (a broker that stays down)
   * are folded, once per 10 s with a count; a configuration warning (CONFWARN: a property that
   * librdkafka ignores) is logged whole, each one.
   */
  private onClientLog(event: { severity: number; fac: string; message: string }): void {
    const fields = { severity: event.severity, fac: event.fac, message: event.message };
    if (event.fac === 'CONFWARN') this.log.warn(fields, 'librdkafka configuration warning');
    else if (event.severity <= LOG_ERR) this.clientErrors.report(fields);
    else if (event.severity <= LOG_WARNING) this.clientWarnings.report(fields);
    else if (event.severity <= LOG_INFO) this.log.info(fields, 'librdkafka');
    else this.log.debug(fields, 'librdkafka');
  }

  private onStats(stats: Statistics): void {
    const acknowledged = this.queue.onStatistics(stats.msg_cnt, stats.msg_size, this.reports.failed, statisticsTakenAt(stats));
    if (acknowledged > 0) this.metrics.delivered.inc(acknowledged);
    this.statistics.export(stats);
    const change = this.state.onStatistics(realBrokers(stats), topicLeaders(stats, this.topic));
    // Reset first: a broker librdkafka no longer lists would otherwise keep its last silence.
    this.metrics.brokerSilent.reset();
    for (const b of this.state.brokersSilence()) this.metrics.brokerSilent.labels(String(b.nodeid)).set(b.silentMs / 1000);
    if (change !== null && 'stalled' in change) {
      const { stalled } = change;
      this.log.warn({ broker: stalled.name, silentMs: stalled.silentMs, waiting: stalled.waiting }, `${silenceReason(stalled)}; refusing points until it answers`);
      this.metrics.stalled.set(1);
    } else if (change !== null) {
      this.log.info({ broker: change.answering.name }, 'kafka brokers answer again; taking points');
      this.metrics.stalled.set(0);
    }
    this.link.followBrokerReachability();
  }

  private updateRefusal(): void {
    const before = this.refusal;
    this.refusal = this.state.refusal();
    if (before === this.refusal) return;
    this.log.info({ from: before ?? 'accepting', to: this.refusal ?? 'accepting' }, 'producer state changed');
    if (this.refusal === null) {
      for (const waiter of this.acceptingWaiters) waiter();
      this.acceptingWaiters.clear();
    }
  }
}

/** How many messages produceBatch queued before it threw (its error says; 0 for any other error). */
function enqueuedBefore(err: unknown): number {
  const enqueued = typeof err === 'object' && err !== null && 'enqueued' in err ? err.enqueued : 0;
  return typeof enqueued === 'number' ? enqueued : 0;
}
