// One producer per worker process (@confluentinc/kafka-javascript, node-rdkafka's API), created by the
// worker itself: each worker is its own librdkafka client (cluster.fork() starts a new process).
// librdkafka does the batching: linger.ms=10, batch.num.messages=100. This module talks to Kafka and
// nothing else; what a request's points go through before and after is the delivery mode's sink
// (write-ahead/delivery-mode.ts).
//
// What it offers the write-ahead path:
//   - produce(batch, tag, timestamp): one native call for a whole request (produceBatch, added to
//     the binding by patches/), every message stamped with the time of acceptance and tagged with its
//     journal record's id; librdkafka counts the acknowledgements per tag
//     (patches/librdkafka-acks-counted-per-tag.patch), read every poll (takeAcks), so Kafka's
//     answers cost no report per message; failures are reported, with the message (onFailed);
//   - produceWithTicket(batch, ticket): ACK_MODE=delivered, a report per message back to its request's
//     ticket (delivery-reports.ts);
//   - refusal: why Kafka takes nothing now (not yet connected, a fatal error, the topic unknown, no
//     broker reachable for longer than BROKER_DOWN_GRACE_MS, brokers that leave requests unanswered
//     that long: broker-silence.ts), and librdkafka's own queue length (rd_kafka_outq_len);
//   - stop(): flushes, then disconnect().
//
// The other jobs live beside this file: settings.ts (the librdkafka properties), broker-link.ts
// (connecting, the topic's metadata every second), broker-state.ts (what is known about Kafka and what
// follows for admission and readiness), broker-silence.ts (a broker that stops answering),
// statistics.ts (librdkafka's statistics to Prometheus), delivery-reports.ts (reports and tickets).
import Kafka from '@confluentinc/kafka-javascript';
import type { ProducerRefusal } from '../api/errors.js';
import type { Config } from '../config.js';
import { Throttled, type Logger } from '../log.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import { BrokerLink } from './broker-link.js';
import { BrokerState, silenceReason } from './broker-state.js';
import { codeName, DeliveryReports, TicketDeadlines, type DeliveryTicket, type FailedMessage } from './delivery-reports.js';
import { messageMaxBytes, type ProducerSettings } from './settings.js';
import { realBrokers, StatisticsExporter, topicLeaders, type Statistics } from './statistics.js';
import { enqueuedBefore, type ProducedBatch } from './produce-batch.js';
import { isFenced, KafkaTransactions } from './transactional-producer.js';

export type { ProducedBatch };

/** What the producer tells its owner. */
export interface ProducerEvents {
  /** A tagged message failed after its 202: its record stays, and it is produced again. */
  onFailed(message: FailedMessage): void;
  /** Kafka takes points again after it did not (the path's replay gets its turn). */
  onAccepting(): void;
  /**
   * A fatal producer error: the worker ends so that a fresh one replaces it; `fenced` when another
   * process took this producer's transactional.id (DELIVERY=exactly-once).
   */
  onFatal(fenced: boolean): void;
}

/** syslog levels, as librdkafka's log events use them. */
const LOG_ERR = 3;
const LOG_WARNING = 4;
const LOG_INFO = 6;

export class KafkaProducer {
  private readonly producer: Kafka.Producer;
  private readonly topic: string;
  /** The largest message the broker takes (message.max.bytes): a point larger is a 413. */
  readonly messageMaxBytes: number;
  private readonly state: BrokerState;
  private readonly reports: DeliveryReports;
  /** ACK_MODE=delivered: every request answered within DELIVERY_TIMEOUT_MS plus a margin. */
  private readonly deadlines: TicketDeadlines;
  private readonly statistics: StatisticsExporter;
  private readonly link: BrokerLink;
  /** librdkafka's queue in bytes, as of its last statistics (a metric; admission counts messages). */
  private statsQueueBytes = 0;
  private refused: ProducerRefusal | null = 'broker_unavailable';
  private readonly brokerErrors: Throttled;
  private readonly clientErrors: Throttled;
  private readonly clientWarnings: Throttled;
  private readonly acceptingWaiters = new Set<() => void>();
  /** DELIVERY=exactly-once (a transactional.id in the settings): the transaction calls; null otherwise. */
  readonly transactions: KafkaTransactions | null;

  constructor(
    config: Config,
    private readonly log: Logger,
    private readonly metrics: WorkerMetrics,
    readonly settings: ProducerSettings,
    private readonly events: ProducerEvents,
    /** How long one connection attempt may take (10 s): the process's exit waits for the one under way. */
    connectTimeoutMs?: number,
  ) {
    this.topic = config.topic;
    this.messageMaxBytes = messageMaxBytes(settings);
    this.state = new BrokerState({ brokers: config.brokers, topic: config.topic, graceMs: config.brokerDownGraceMs });
    this.statistics = new StatisticsExporter(metrics, config.topic);
    this.deadlines = new TicketDeadlines(config.deliveryTimeoutMs);
    this.reports = new DeliveryReports(metrics, log, (failed) => events.onFailed(failed));
    // Throws on an unknown or invalid property: the worker reports it as a configuration error.
    this.producer = new Kafka.Producer(settings.global, settings.topic);
    if (typeof this.producer.produceBatch !== 'function' || typeof this.producer.takeAcks !== 'function') {
      throw new Error(
        '@confluentinc/kafka-javascript lacks produceBatch and takeAcks: patches/ was not applied; run scripts/build-kafka-client.sh (scripts/install.sh runs it)',
      );
    }
    this.link = new BrokerLink(this.producer, this.state, {
      brokers: config.brokers,
      topic: config.topic,
      log,
      connectTimeoutMs,
      changed: () => this.updateRefusal(),
    });
    this.brokerErrors = new Throttled(log, 'warn', 'kafka client error');
    this.transactions =
      settings.global['transactional.id'] === undefined
        ? null
        : new KafkaTransactions(
            this.producer,
            this.topic,
            () => this.takeAcks(),
            (err, enqueued, count) => this.brokerErrors.report({ err, enqueued, count, kept: 'in the journal, produced again in the next transaction' }),
          );
    // The binding's error events carry only the code's name ("ssl error"); librdkafka says why in its
    // log ("SSL handshake failed: ... certificate verify failed"), passed on here at its level.
    this.clientErrors = new Throttled(log, 'error', 'librdkafka');
    this.clientWarnings = new Throttled(log, 'warn', 'librdkafka');
    this.producer.on('delivery-report', (err, report) => this.reports.onReport(err, report));
    this.producer.on('event.error', (err) => this.onError(err));
    this.producer.on('event.stats', (event: { message: string }) => this.onStats(JSON.parse(event.message) as Statistics));
    this.producer.on('event.log', (event: { severity: number; fac: string; message: string }) => this.onClientLog(event));
  }

  /** Why Kafka takes nothing now, or null; recomputed on every state change (read for every request). */
  get refusal(): ProducerRefusal | null {
    return this.refused;
  }

  /** Connects in the background and keeps retrying; until then `refusal` is 'broker_unavailable'. */
  start(): void {
    this.link.connect();
  }

  /** Messages in librdkafka's queue, not yet acknowledged or failed (rd_kafka_outq_len, exact). */
  get queuedPoints(): number {
    return this.link.connected ? this.producer.queueLength() : 0;
  }

  /** librdkafka's queue in bytes, as of its last statistics. */
  get queuedBytes(): number {
    return this.statsQueueBytes;
  }

  /** Whether Kafka takes points now (readiness aside from the worker's own state). */
  get available(): boolean {
    return this.state.kafkaAvailable();
  }

  /** Why this worker is not ready on Kafka's side, or null. */
  unreadyReason(): string | null {
    return this.state.unreadyReason();
  }

  /** Resolves true once Kafka takes points, or false after timeoutMs. */
  whenAccepting(timeoutMs: number): Promise<boolean> {
    if (this.refused === null) return Promise.resolve(true);
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

  /**
   * Hands a journal record's messages to librdkafka under its tag, with its acceptance time as their
   * Kafka timestamp (not the device clock: a device clock hours ahead would make the broker reject the
   * whole batch); returns how many it took (all, or the first n when it refused one midway: a queue
   * full of bytes).
   */
  produce(batch: ProducedBatch, tag: number, timestamp: number): number {
    try {
      return this.producer.produceBatch(this.topic, batch.data, batch.messages, tag, timestamp);
    } catch (err) {
      const enqueued = enqueuedBefore(err);
      this.brokerErrors.report({ err, enqueued, count: batch.count, kept: 'in the journal, produced again later' });
      return enqueued;
    }
  }

  /**
   * ACK_MODE=delivered: hands the messages to librdkafka with a report per message back to `ticket`,
   * which settles once Kafka answered for every point, or at the deadline. 'producer_failed' when
   * librdkafka refused a message midway: the request is answered 500 now, and the points already
   * queued are delivered (a resend duplicates them: never a loss).
   */
  produceWithTicket(batch: ProducedBatch, ticket: DeliveryTicket): 'producer_failed' | null {
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
        this.log.error(
          { err, enqueued, count },
          'produce failed midway: the points already queued will be delivered; the client gets 500 and may resend them (duplicates, never a loss)',
        );
      } else {
        this.brokerErrors.report({ err });
      }
      return 'producer_failed';
    }
    return null;
  }

  /**
   * Kafka's acknowledgements since the last call, counted per tag by librdkafka: pairs of (tag,
   * points acknowledged); undefined while not connected.
   */
  takeAcks(): Uint32Array | undefined {
    return this.link.connected ? this.producer.takeAcks() : undefined;
  }

  /**
   * Stops taking points and waits until every queued point is acknowledged or has failed, at most
   * until `deadline` (Date.now()); true when librdkafka's queue emptied.
   */
  async stop(deadline: number): Promise<boolean> {
    this.state.onStopping();
    this.updateRefusal();
    this.link.stop();
    // librdkafka's flush succeeds once its queue is empty: every message acknowledged or failed.
    let flushed = !this.link.connected;
    while (!flushed && Date.now() < deadline) {
      flushed = await new Promise<boolean>((resolve) => {
        this.producer.flush(Math.max(1, Math.min(500, deadline - Date.now())), (err) => resolve(!err));
      });
    }
    this.reports.flushLog();
    return flushed;
  }

  /**
   * Disconnects, within timeoutMs (at least 1 s). A transaction call still under way is waited for
   * first: disconnecting destroys the librdkafka client that call's thread is blocked in, and the
   * process aborts (librdkafka asserts in rd_kafka_txn_curr_api_return0: a worker stopped while its
   * initTransactions waited for the coordinator did). Still under way at the deadline, the client is
   * left as it is: the process exits next, and the broker ends what the call began.
   */
  async disconnect(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    const underWay = this.transactions?.callUnderWay() ?? null;
    if (underWay !== null) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([underWay, new Promise((resolve) => (timer = setTimeout(resolve, Math.max(0, timeoutMs))))]);
      clearTimeout(timer);
      if (this.transactions?.callUnderWay() !== null) {
        this.log.warn(
          { timeoutMs },
          'a Kafka transaction call is still under way: the producer is left connected (disconnecting under it would crash the process)',
        );
        return;
      }
    }
    await this.link.disconnect(deadline - Date.now());
  }

  // ---- events from the binding -----------------------------------------------------------------

  private onError(err: Kafka.LibrdKafkaError): void {
    if (err.isFatal) {
      this.state.onFatalError();
      this.log.fatal(
        { err },
        'fatal kafka producer error: this worker stops taking points and is replaced (ACK_MODE=async: the journal keeps what Kafka has not acknowledged)',
      );
      this.updateRefusal();
      this.events.onFatal(isFenced(err));
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
      this.log.warn(
        { broker: stalled.name, silentMs: stalled.silentMs, waiting: stalled.waiting },
        `${silenceReason(stalled)}; refusing points until it answers`,
      );
      this.metrics.stalled.set(1);
    } else if (change !== null) {
      this.log.info({ broker: change.answering.name }, 'kafka brokers answer again; taking points');
      this.metrics.stalled.set(0);
    }
    this.link.followBrokerReachability();
  }

  private updateRefusal(): void {
    const before = this.refused;
    this.refused = this.state.refusal();
    if (before === this.refused) return;
    this.log.info({ from: before ?? 'accepting', to: this.refused ?? 'accepting' }, 'producer state changed');
    if (this.refused === null) {
      for (const waiter of this.acceptingWaiters) waiter();
      this.acceptingWaiters.clear();
      this.events.onAccepting();
    }
  }
}
