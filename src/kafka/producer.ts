// One node-rdkafka producer per worker process, created by the worker itself: each worker is its own
// librdkafka client (cluster.fork() starts a new process). librdkafka does the batching: linger.ms=10,
// batch.num.messages=100.
//
// What this module promises the HTTP edge:
//   - tryEnqueue() takes all points of a request or none;
//   - ACK_MODE=async (the default): journal first, then produce. A request is a record of the
//     write-ahead journal (journal/journal.ts) before it is answered 202, and stays there until Kafka
//     has acknowledged every point of it: a crash, a failed delivery or a restart during an outage
//     loses nothing. The record's id is its messages' tag: librdkafka counts acknowledgements per tag
//     (patches/librdkafka-2.12-acks-counted-per-tag.patch), read every poll (takeAcks), so Kafka's
//     answers cost no report per message; failures are reported, with the message, and produced
//     again after a back-off (redelivery.ts);
//   - ACK_MODE=delivered: a report per message back to its request's ticket; the answer waits for
//     Kafka (delivery-reports.ts);
//   - it refuses while the producer cannot deliver: not yet connected, a fatal error, the topic
//     unknown, no broker reachable for longer than BROKER_DOWN_GRACE_MS, brokers that leave requests
//     unanswered that long (broker-silence.ts), librdkafka's queue at PRODUCER_QUEUE_MAX_POINTS (its
//     own count, rd_kafka_outq_len), or the journal full (JOURNAL_MAX_BYTES) or not writable.
//
// The other jobs live beside this file: settings.ts (the librdkafka properties), broker-link.ts
// (connecting, the topic's metadata every second), broker-state.ts (what is known about Kafka and what
// follows for admission and readiness), broker-silence.ts (a broker that stops answering),
// statistics.ts (librdkafka's statistics to Prometheus), delivery-reports.ts (reports and tickets),
// redelivery.ts (producing again what failed or an earlier process left).
import Kafka from 'node-rdkafka';
import type { Config } from '../config.js';
import type { ProducerRefusal } from '../api/errors.js';
import type { Journal } from '../journal/journal.js';
import { recordBytes, type JournalBatch } from '../journal/record.js';
import { Throttled, type Logger } from '../log.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import type { EncodedPoints } from '../track-point/encode.js';
import { BrokerLink, POLL_INTERVAL_MS } from './broker-link.js';
import { BrokerState, silenceReason } from './broker-state.js';
import { codeName, DeliveryReports, newTicket, TicketDeadlines, type DeliveryTicket } from './delivery-reports.js';
import { Redelivery } from './redelivery.js';
import { messageMaxBytes, type ProducerSettings } from './settings.js';
import { realBrokers, StatisticsExporter, topicLeaders, type Statistics } from './statistics.js';

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
  private readonly messageMaxBytes: number;
  private readonly delivered: boolean;
  private readonly state: BrokerState;
  private readonly reports: DeliveryReports;
  /** ACK_MODE=delivered: every request answered within DELIVERY_TIMEOUT_MS plus a margin. */
  private readonly deadlines: TicketDeadlines;
  private readonly redelivery: Redelivery;
  private readonly statistics: StatisticsExporter;
  private readonly link: BrokerLink;
  /** librdkafka's queue in bytes, as of its last statistics (a metric; admission counts messages). */
  private statsQueueBytes = 0;

  /** The answer tryEnqueue gives before looking at the queue; recomputed on every state change. */
  private refusal: ProducerRefusal | null = 'broker_unavailable';
  /** Called once on a fatal producer error: the worker ends so that a fresh one replaces it. */
  onFatal: (() => void) | null = null;
  private readonly brokerErrors: Throttled;
  private readonly journalErrors: Throttled;
  private readonly clientErrors: Throttled;
  private readonly clientWarnings: Throttled;
  private readonly acceptingWaiters = new Set<() => void>();
  /**
   * Room admission asks for before a body is read: one point, or as many as the last request that
   * did not fit, until one fits. Under a closed loop at 100 points per request the queue sits just
   * below its mark; asked for one point, admission let every request through to be parsed, refused,
   * and parsed again from the waiting room, for as long as the queue stayed there (1.2 µs per point
   * more than the build before, wrk at 100 points per request).
   */
  private roomWanted = 1;
  /** Acknowledgements read every poll while records are in flight (takeAcks). */
  private ackTimer: NodeJS.Timeout | null = null;

  constructor(
    config: Config,
    private readonly log: Logger,
    private readonly metrics: WorkerMetrics,
    private readonly journal: Journal,
    readonly settings: ProducerSettings,
  ) {
    this.topic = config.topic;
    this.maxPoints = config.queueMaxPoints;
    this.delivered = config.ackMode === 'delivered';
    this.messageMaxBytes = messageMaxBytes(settings);
    this.state = new BrokerState({ brokers: config.brokers, topic: config.topic, graceMs: config.brokerDownGraceMs });
    this.statistics = new StatisticsExporter(metrics, config.topic);
    this.deadlines = new TicketDeadlines(config.deliveryTimeoutMs);
    this.redelivery = new Redelivery(
      journal,
      {
        produce: (batch, tag, timestamp) => this.produceTagged(batch, tag, timestamp),
        queueLength: () => this.producer.queueLength(),
        kafkaAvailable: () => this.state.kafkaAvailable(),
      },
      // Redelivery takes librdkafka's queue up to half the limit: new requests keep the other half.
      Math.ceil(config.queueMaxPoints / 2),
    );
    this.reports = new DeliveryReports(metrics, log, (failed) => this.redelivery.fail(failed));
    // Throws on an unknown or invalid property: the worker reports it as a configuration error.
    this.producer = new Kafka.Producer(settings.global, settings.topic);
    if (typeof this.producer.produceBatch !== 'function' || typeof this.producer.takeAcks !== 'function') {
      throw new Error('node-rdkafka lacks produceBatch and takeAcks: patches/ was not applied; run scripts/patch-node-rdkafka.sh (npm ci runs it)');
    }
    this.link = new BrokerLink(this.producer, this.state, { brokers: config.brokers, topic: config.topic, log, changed: () => this.updateRefusal() });
    this.brokerErrors = new Throttled(log, 'warn', 'kafka client error');
    this.journalErrors = new Throttled(log, 'error', 'cannot write the journal: POST /track answers 500 journal_full until it can');
    // node-rdkafka's error events carry only the code's name ("ssl error"); librdkafka says why in its
    // log ("SSL handshake failed: ... certificate verify failed"), passed on here at its level.
    this.clientErrors = new Throttled(log, 'error', 'librdkafka');
    this.clientWarnings = new Throttled(log, 'warn', 'librdkafka');
    metrics.setQueueSource(() => ({ points: this.queuedPoints, bytes: this.statsQueueBytes }));
    metrics.setJournalSource(() => ({
      bytes: journal.bytes,
      records: journal.records,
      oldestMs: journal.oldestTimestamp,
      corrupt: journal.corruptRecords,
      ...this.redelivery.counts,
    }));
    this.producer.on('delivery-report', (err, report) => this.reports.onReport(err, report));
    this.producer.on('event.error', (err) => this.onError(err));
    this.producer.on('event.stats', (event: { message: string }) => this.onStats(JSON.parse(event.message) as Statistics));
    this.producer.on('event.log', (event: { severity: number; fac: string; message: string }) => this.onClientLog(event));
  }

  /** Connects in the background and keeps retrying; until then tryEnqueue refuses with 'broker_unavailable'. */
  start(): void {
    this.link.connect();
    // Records an earlier process left (or an earlier version's spill journal): produced once Kafka is there.
    if (this.journal.recovering) this.followAcks();
  }

  /** Messages in librdkafka's queue, not yet acknowledged or failed (rd_kafka_outq_len, exact). */
  get queuedPoints(): number {
    return this.link.connected ? this.producer.queueLength() : 0;
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

  /** /readyz: what Kafka allows (broker-state.ts), then whether the journal takes records. */
  readiness(): { ready: boolean; reason: string } {
    const unready = this.state.unreadyReason();
    if (unready !== null) return { ready: false, reason: unready };
    if (!this.journal.writable()) return { ready: false, reason: this.journal.writeFailure?.message ?? 'the journal cannot be written' };
    if (!this.delivered && !this.journal.fits(this.journalHeadroom)) {
      return { ready: false, reason: `journal full: ${this.journal.bytes} of ${this.journal.capacity} bytes (JOURNAL_MAX_BYTES) hold points Kafka has not acknowledged` };
    }
    return { ready: true, reason: 'ok' };
  }

  /** Room a worker keeps in the journal to call itself ready: one request of 100 points, about. */
  private readonly journalHeadroom = 16 * 1024;

  /**
   * Why a request would be refused right now, asked before its body is read: under overload the
   * service spends nothing on points it cannot take. No side effect: the waiting room
   * (http/waiting-room.ts) asks it every few milliseconds.
   */
  admission(): ProducerRefusal | null {
    if (this.refusal !== null) return this.refusal;
    if (this.queuedPoints + this.redelivery.backlog + this.roomWanted > this.maxPoints) return 'queue_full';
    if (!this.delivered && (!this.journal.writable() || !this.journal.fits(this.journalHeadroom))) return 'journal_full';
    return null;
  }

  /**
   * Takes every point of one request, or none; returns null when taken, else why not.
   *
   * One native call for the whole request (produceBatch, added to node-rdkafka by patches/), which
   * stamps every message with the time of acceptance, not the device clock: a device clock hours
   * ahead would make the broker reject the whole batch.
   *
   * ACK_MODE=async: the record is written to the journal first, and the 202 stands on it; should
   * librdkafka refuse some of its messages (a queue full of bytes), they are produced again later
   * (redelivery.ts). With a ticket (JOURNAL_SYNC=disk) the ticket settles once the record is on the
   * disk. ACK_MODE=delivered: the ticket settles once Kafka answered for every point; librdkafka
   * refusing a message midway answers 500 for the request (the points queued are delivered, and a
   * resend duplicates them: never a loss).
   */
  tryEnqueue(batch: EncodedPoints, ticket: DeliveryTicket | null = null): Refusal | null {
    if (this.refusal !== null) return this.refusal;
    const count = batch.count;
    // The queue is librdkafka's and what waits to be produced again (redelivery.ts): both in memory.
    if (this.queuedPoints + this.redelivery.backlog + count > this.maxPoints) {
      this.roomWanted = count;
      return 'queue_full';
    }
    this.roomWanted = 1;
    if (batch.largestValue > this.messageMaxBytes) return 'message_too_large';
    if (this.delivered) return this.enqueueDelivered(batch, ticket ?? newTicket(() => {}));

    if (!this.journal.fits(recordBytes(batch))) return 'journal_full';
    const timestamp = Date.now();
    let record;
    try {
      record = this.journal.append(batch, timestamp);
    } catch (err) {
      this.journalErrors.report({ err });
      return 'journal_full';
    }
    const taken = this.produceTagged(batch, record.id, timestamp);
    if (taken < count) this.redelivery.keepUnproduced(record.id, batch, taken);
    this.followAcks();
    if (ticket !== null) {
      ticket.remaining = count;
      this.journal.afterCommit((err) => {
        if (err !== null) {
          // Not on the disk: the request is answered 500 (its points may still reach Kafka: a resend may duplicate them).
          ticket.failed = count;
          ticket.uncertain = count;
          ticket.firstError = err.message;
        }
        ticket.remaining = 0;
        ticket.settled = true;
        ticket.settle(ticket);
      });
    }
    return null;
  }

  /** produceBatch under a record's tag; returns how many of its messages librdkafka took. */
  private produceTagged(batch: JournalBatch, tag: number, timestamp: number): number {
    try {
      return this.producer.produceBatch(this.topic, batch.data, batch.messages, tag, timestamp);
    } catch (err) {
      const enqueued = enqueuedBefore(err);
      this.brokerErrors.report({ err, enqueued, count: batch.count, kept: 'in the journal, produced again later' });
      return enqueued;
    }
  }

  private enqueueDelivered(batch: EncodedPoints, ticket: DeliveryTicket): Refusal | null {
    const count = batch.count;
    try {
      ticket.remaining = count;
      ticket.enqueuedAt = performance.now();
      this.producer.produceBatch(this.topic, batch.data, batch.messages, ticket);
      this.deadlines.watch(ticket);
    } catch (err) {
      // Only the points already queued will report: the request is answered 500 now, not by settle().
      const enqueued = enqueuedBefore(err);
      ticket.remaining = enqueued;
      if (enqueued > 0) {
        this.metrics.deliveryErrors.labels('PARTIAL_ENQUEUE').inc(enqueued);
        this.log.error({ err, enqueued, count }, 'produce failed midway: the points already queued will be delivered; the client gets 500 and may resend them (duplicates, never a loss)');
      } else {
        this.brokerErrors.report({ err });
      }
      return 'producer_failed';
    }
    return null;
  }

  // ---- acknowledgements ------------------------------------------------------------------------

  /** Reads acknowledgements every poll while records are in flight or left to produce again. */
  private followAcks(): void {
    this.ackTimer ??= setInterval(() => this.takeAcks(), POLL_INTERVAL_MS);
  }

  /**
   * Kafka's acknowledgements since the last poll, counted per record by librdkafka: each record done
   * is marked in the journal (its segment deleted once all its records are), its delivery latency
   * observed. Then what is to be produced again gets its turn.
   */
  private takeAcks(): void {
    const acks = this.link.connected ? this.producer.takeAcks() : undefined;
    if (acks !== undefined) {
      let acknowledged = 0;
      const now = performance.now();
      for (let i = 0; i < acks.length; i += 2) {
        const n = acks[i + 1]!;
        acknowledged += n;
        const done = this.journal.acknowledged(acks[i]!, n);
        if (done !== null) this.metrics.deliveryLatency.observe((now - done.producedAt) / 1000);
      }
      this.metrics.delivered.inc(acknowledged);
      this.redelivery.acknowledged();
      this.journal.flushMarks();
    }
    this.redelivery.pass();
    if (this.journal.records === 0 && !this.journal.recovering && this.redelivery.backlog === 0 && this.ackTimer !== null) {
      clearInterval(this.ackTimer);
      this.ackTimer = null;
    }
  }

  /**
   * Stops taking points and waits until every queued point is acknowledged or has failed, at most
   * timeoutMs. Returns how many points Kafka has not acknowledged: in ACK_MODE=async they stay in
   * the journal for the next start.
   */
  async drain(timeoutMs: number): Promise<number> {
    this.state.onStopping();
    this.updateRefusal();
    this.link.stop();
    const deadline = Date.now() + timeoutMs;
    // librdkafka's flush succeeds once its queue is empty: every message acknowledged or failed.
    let flushed = !this.link.connected;
    while (!flushed && Date.now() < deadline) {
      flushed = await new Promise<boolean>((resolve) => {
        this.producer.flush(Math.max(1, Math.min(500, deadline - Date.now())), (err) => resolve(!err));
      });
    }
    // Failure reports of the last messages reach JavaScript through the poll loop; give it a turn.
    await new Promise((r) => setTimeout(r, POLL_INTERVAL_MS * 2));
    this.takeAcks();
    if (this.ackTimer !== null) clearInterval(this.ackTimer);
    this.ackTimer = null;
    this.reports.flushLog();
    const left = this.delivered ? (flushed ? 0 : Math.max(1, this.queuedPoints)) : this.journal.pendingPoints;
    await this.link.disconnect(deadline - Date.now());
    return left;
  }

  // ---- events from node-rdkafka -----------------------------------------------------------------

  private onError(err: Kafka.LibrdKafkaError): void {
    if (err.isFatal) {
      this.state.onFatalError();
      this.log.fatal({ err }, 'fatal kafka producer error: this worker stops taking points and is replaced (ACK_MODE=async: the journal keeps what Kafka has not acknowledged)');
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
    this.statsQueueBytes = stats.msg_size;
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
      // Kafka takes points again: what waits in the journal gets its turn at the next poll.
      if (this.journal.recovering || this.redelivery.backlog > 0) this.followAcks();
    }
  }
}

/** How many messages produceBatch queued before it threw (its error says; 0 for any other error). */
function enqueuedBefore(err: unknown): number {
  const enqueued = typeof err === 'object' && err !== null && 'enqueued' in err ? err.enqueued : 0;
  return typeof enqueued === 'number' ? enqueued : 0;
}
