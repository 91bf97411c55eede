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
// Queue accounting comes from librdkafka itself, not from a delivery report per message:
// node-rdkafka hands JavaScript at most 100 delivery reports per event-loop turn (callbacks.cc,
// DeliveryReportDispatcher::Flush), each a new object and an event, so under load acknowledgements
// fell behind and the queue looked full while Kafka already had the messages (measured: ~45k
// points/s per worker, most requests answered 500). With delivery.report.only.error=true only
// failures come back as reports; the depth of the queue is librdkafka's own `msg_cnt`/`msg_size`
// (statistics every 100 ms) plus what was enqueued since those statistics were read.
//
// A failure report carries the message (dr_msg_cb), and in ACK_MODE=async the point goes to the spill
// journal, to be replayed (spill-replay.ts): a 202 is never silently lost. Admission keeps room for
// that: a request is refused once the journal could not take the whole producer queue as well.
//
// ACK_MODE=delivered is the exception to "reports only for failures": every message carries its
// request's DeliveryTicket (opaque) and reports back, and the request is answered when all did.
// Capped by node-rdkafka's report rate above, it is the slower, end-to-end mode.
import Kafka from 'node-rdkafka';
import { SPILL_RECORD_OVERHEAD_BYTES, spillReserveBytes, type Config } from '../config.js';
import { Throttled, type Logger } from '../log.js';
import type { WorkerMetrics } from '../metrics.js';
import type { EncodedPoints } from '../track-point/encode.js';
import { CONTAINER_ID_MAX_LENGTH } from '../track-point/schema.js';
import { BrokerSilence, type SilentBroker } from './broker-silence.js';
import type { SpillJournal } from './spill-journal.js';

export type Refusal =
  | 'connecting'
  | 'fatal_error'
  | 'topic_unknown'
  | 'broker_down'
  | 'broker_stalled'
  | 'queue_full'
  | 'message_too_large'
  | 'produce_failed'
  | 'spill_full'
  | 'shutting_down';

/**
 * ACK_MODE=delivered: one per request. The producer counts its points down as Kafka reports them and
 * calls settle() once, when the last one reported; `failed` says how many were not acknowledged.
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

/** librdkafka's default `message.max.bytes`; overridable through MQ_OPT_MESSAGE_MAX_BYTES. */
const DEFAULT_MESSAGE_MAX_BYTES = 1_000_000;
/** syslog levels, as librdkafka's log events use them. */
const LOG_WARNING = 4;
/** How often librdkafka's callbacks (error reports, statistics) are served to JavaScript. */
const POLL_INTERVAL_MS = 10;
const RECONNECT_DELAY_MS = 1_000;
/** A metadata request this often keeps a silent broker visible to an idle worker (startHeartbeat). */
const HEARTBEAT_INTERVAL_MS = 1_000;
/** Statistics drive the queue accounting, readiness and the Kafka metrics: 10 a second. */
const STATS_INTERVAL_MS = 100;

/** The librdkafka properties the contract fixes. MQ_OPT_* may override any of them, at the operator's risk. */
export function producerSettings(config: Config, clientId: string): { global: Kafka.ProducerGlobalConfig; topic: Kafka.ProducerTopicConfig } {
  // librdkafka's own queue limits sit well above our high-water mark, so that produce() never fails
  // with QUEUE_FULL for a request we have admitted: our estimate of the queue can lag librdkafka's by
  // what was acknowledged since its last statistics (it errs high) or, briefly, by what JavaScript
  // enqueued while a statistics event waited in the event loop (it errs low, by far less than the
  // headroom of half the high-water mark plus one maximal request). Its byte count includes keys.
  const maxKeyBytes = CONTAINER_ID_MAX_LENGTH * 3;
  const librdMessages = Math.ceil(config.queueMaxPoints * 1.5) + config.maxPoints;
  const librdKbytes = Math.ceil((config.queueMaxBytes * 1.5 + 4 * config.maxBodyBytes + librdMessages * maxKeyBytes) / 1024);
  const global: Kafka.ProducerGlobalConfig = {
    'metadata.broker.list': config.brokers,
    'client.id': clientId,
    'linger.ms': 10,
    'batch.num.messages': 100,
    // Idempotence implies acks=all, max.in.flight<=5 and retries without duplicates or reordering.
    'enable.idempotence': true,
    'queue.buffering.max.messages': Math.min(librdMessages, 2_147_483_647),
    'queue.buffering.max.kbytes': Math.min(librdKbytes, 2_147_483_647),
    'statistics.interval.ms': STATS_INTERVAL_MS,
    'socket.keepalive.enable': true,
    ...(config.ackMode === 'async'
      ? // Reports only for failed messages (see the top of this file), with the message to spill;
        // for every message when DELIVERY_LATENCY_HISTOGRAM=1 asks for the latency of each.
        { dr_msg_cb: true, 'delivery.report.only.error': !config.deliveryLatencyHistogram }
      : // A report per message; a request waits for Kafka at most DELIVERY_TIMEOUT_MS.
        { dr_cb: true, 'delivery.report.only.error': false, 'message.timeout.ms': config.deliveryTimeoutMs }),
    // librdkafka accepts topic-level properties here too and applies them to every topic.
    ...(config.producerOptions as Kafka.ProducerGlobalConfig),
  };
  const topic: Kafka.ProducerTopicConfig = {
    acks: -1, // "all"
    // The Java client's default, so other producers of the same keys land on the same partitions.
    partitioner: 'murmur2_random',
  };
  return { global, topic };
}

interface BrokerStats {
  name: string;
  nodeid: number;
  state: string;
  rx: number;
  txretries: number;
  waitresp_cnt: number;
  int_latency?: Window;
  outbuf_latency?: Window;
  rtt?: Window;
}
interface Window {
  p50: number;
  p99: number;
  cnt: number;
}
interface Stats {
  msg_cnt: number;
  msg_size: number;
  brokers?: Record<string, BrokerStats>;
  topics?: Record<string, { partitions?: Record<string, { partition: number; leader: number }>; batchcnt?: { avg: number; cnt: number } }>;
}

export class TrackProducer {
  private readonly producer: Kafka.Producer;
  private readonly topic: string;
  private readonly maxPoints: number;
  private readonly maxBytes: number;
  private readonly messageMaxBytes: number;
  private readonly graceMs: number;
  private readonly spillReserve: number;
  private readonly spillMustKeep: boolean;

  private connected = false;
  private fatal = false;
  private stopping = false;
  private topicReady = false;
  private brokersUp = 0;
  /** Since when no broker has been reachable (ms epoch), or null while one is. */
  private downSince: number | null = null;
  /** Brokers that keep their connection but answer nothing (broker-silence.ts). */
  private readonly silence = new BrokerSilence();
  /** The silent broker that stalls this producer, or null. */
  private stalledBy: SilentBroker | null = null;
  /** The answer tryEnqueue gives before looking at the queue; recomputed on every state change. */
  private refusal: Refusal | null = 'connecting';
  /** Messages and bytes enqueued since the process started (bytes: keys and values). */
  private enqueued = 0;
  private enqueuedBytes = 0;
  /** From the latest statistics: librdkafka's queue depth, and our counters when they were read. */
  private statsQueue = 0;
  private statsQueueBytes = 0;
  private enqueuedAtStats = 0;
  private enqueuedBytesAtStats = 0;
  private failed = 0;
  private spilled = 0;
  private lost = 0;
  private deliveredReported = 0;
  /** Called once on a fatal producer error: the worker ends so that a fresh one replaces it. */
  onFatal: (() => void) | null = null;
  private readonly retriesSeen = new Map<string, number>();
  private readonly deliveryFailures: Throttled;
  private readonly connectFailures: Throttled;
  private readonly brokerErrors: Throttled;
  private readonly clientLog: Throttled;
  private graceTimer: NodeJS.Timeout | null = null;
  private readonly acceptingWaiters = new Set<() => void>();
  private metadataTimer: NodeJS.Timeout | null = null;
  private probeTimer: NodeJS.Timeout | null = null;
  private probing = false;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private heartbeatInFlight = false;

  constructor(
    private readonly config: Config,
    private readonly log: Logger,
    private readonly metrics: WorkerMetrics,
    private readonly journal: SpillJournal,
    readonly settings: ReturnType<typeof producerSettings>,
  ) {
    this.topic = config.topic;
    this.maxPoints = config.queueMaxPoints;
    this.maxBytes = config.queueMaxBytes;
    this.graceMs = config.brokerDownGraceMs;
    this.spillReserve = spillReserveBytes(config);
    // In delivered mode a failed point is answered 500, not spilled: the journal only holds the past.
    this.spillMustKeep = config.ackMode === 'async';
    this.messageMaxBytes = Number(settings.global['message.max.bytes'] ?? DEFAULT_MESSAGE_MAX_BYTES);
    // Throws on an unknown or invalid property: the worker reports it as a configuration error.
    this.producer = new Kafka.Producer(settings.global, settings.topic);
    this.deliveryFailures = new Throttled(log, 'error', 'kafka delivery failed for accepted points');
    this.connectFailures = new Throttled(log, 'warn', 'cannot connect to kafka; retrying');
    this.brokerErrors = new Throttled(log, 'warn', 'kafka client error');
    // node-rdkafka's error events carry only the code's name ("ssl error"); librdkafka says why in its
    // log ("SSL handshake failed: ... certificate verify failed"), warnings and worse passed on here.
    this.clientLog = new Throttled(log, 'warn', 'librdkafka');
    metrics.setQueueSource(() => ({ points: this.queuedPoints, bytes: this.queuedBytes }));
    metrics.setSpillSource(() => journal.bytes);
    this.producer.on('delivery-report', (err, report) => this.onDelivery(err, report));
    this.producer.on('event.error', (err) => this.onError(err));
    this.producer.on('event.stats', (event: { message: string }) => this.onStats(event.message));
    this.producer.on('event.log', (event: { severity: number; fac: string; message: string }) => {
      if (event.severity <= LOG_WARNING) this.clientLog.report({ severity: event.severity, fac: event.fac, message: event.message });
    });
  }

  /** Connects in the background and keeps retrying; until then tryEnqueue refuses with 'connecting'. */
  start(): void {
    this.connect();
  }

  /** Points accepted and not yet acknowledged by Kafka or failed (librdkafka's count, kept current). */
  get queuedPoints(): number {
    return this.statsQueue + (this.enqueued - this.enqueuedAtStats);
  }

  /** Accepted points whose delivery failed (timed out, fatal error): each was reported and logged. */
  get failedPoints(): number {
    return this.failed;
  }

  /** Of those, the points kept in the spill journal, and those it could not take. */
  get spilledPoints(): number {
    return this.spilled;
  }

  get lostPoints(): number {
    return this.lost;
  }

  get queuedBytes(): number {
    return this.statsQueueBytes + (this.enqueuedBytes - this.enqueuedBytesAtStats);
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
    return !this.stopping && !this.fatal && this.connected && this.brokersUp > 0 && this.topicReady && this.stalledBy === null;
  }

  /**
   * /readyz: a broker connection and the topic's metadata, right now (no grace period), and brokers
   * that answer (a silent broker is a stall once BROKER_DOWN_GRACE_MS passed with no answer at all).
   */
  readiness(): { ready: boolean; reason: string } {
    if (this.stopping) return { ready: false, reason: 'shutting down' };
    if (this.fatal) return { ready: false, reason: 'fatal producer error' };
    if (!this.connected) return { ready: false, reason: `not connected to ${this.config.brokers}` };
    if (this.brokersUp === 0) return { ready: false, reason: 'no broker reachable' };
    if (this.stalledBy !== null) return { ready: false, reason: silenceReason(this.stalledBy) };
    if (!this.topicReady) return { ready: false, reason: `topic ${this.topic} unknown or without leaders` };
    if (this.journal.writeFailure !== null) return { ready: false, reason: this.journal.writeFailure.message };
    if (this.spillMustKeep && this.journal.bytes + this.spillReserve > this.journal.capacity) {
      return { ready: false, reason: `spill journal full: ${this.journal.bytes} of ${this.journal.capacity} bytes (SPILL_MAX_BYTES) hold points waiting for Kafka` };
    }
    return { ready: true, reason: 'ok' };
  }

  /**
   * Why a request would be refused right now, asked before its body is parsed: under overload the
   * service spends nothing on points it cannot take (measured before this check: 82 % of a saturated
   * worker's requests were parsed, validated and encoded, then refused).
   */
  admission(): Refusal | null {
    if (this.refusal !== null) return this.refusal;
    if (this.queuedPoints >= this.maxPoints || this.queuedBytes >= this.maxBytes) {
      this.metrics.queueFull.inc();
      return 'queue_full';
    }
    if (this.spillMustKeep && !this.spillHasRoomFor(0, 0)) return 'spill_full';
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
   * All or nothing holds because every condition under which librdkafka's produce() fails
   * synchronously is checked before the first call:
   *   ERR__QUEUE_FULL        our high-water mark is far below librdkafka's queue limits
   *                          (producerSettings), so admitted points fit;
   *   ERR_MSG_SIZE_TOO_LARGE the largest value is compared with message.max.bytes;
   *   ERR__FATAL / ERR__STATE / unknown topic  are states we track from events (`refusal`).
   * What remains is a fatal error raised by librdkafka's thread during this very loop: then the
   * messages already queued fail with ERR__FATAL too and are not written. Should produce() still
   * throw midway, the request is answered 500, the points already queued are delivered, and a client
   * retry duplicates them: never a loss. Both cases are logged and counted as delivery errors.
   */
  tryEnqueue(batch: EncodedPoints, ticket: DeliveryTicket | null = null): Refusal | null {
    if (this.refusal !== null) return this.refusal;
    if (this.queuedPoints + batch.count > this.maxPoints || this.queuedBytes + batch.bytes > this.maxBytes) {
      this.metrics.queueFull.inc();
      return 'queue_full';
    }
    if (batch.largestValue > this.messageMaxBytes) return 'message_too_large';
    if (this.spillMustKeep && !this.spillHasRoomFor(batch.count, batch.bytes)) return 'spill_full';

    // The Kafka timestamp is the time of acceptance, not the device clock (README, "The Kafka messages"): a device
    // clock hours ahead would make the broker reject the whole batch.
    const now = Date.now();
    const { keys, values, count } = batch;
    const topic = this.topic;
    let i = 0;
    try {
      // keys and values have one entry per point (encodePoints).
      if (ticket === null) {
        for (const value of values) {
          this.producer.produce(topic, null, value, keys[i], now);
          i++;
        }
      } else {
        ticket.remaining = count;
        ticket.enqueuedAt = performance.now();
        for (const value of values) {
          this.producer.produce(topic, null, value, keys[i], now, ticket);
          i++;
        }
      }
    } catch (err) {
      // Only the points already queued will report: the request is answered 500 now, not by settle().
      if (ticket !== null) ticket.remaining = i;
      this.enqueued += i;
      this.enqueuedBytes += i === 0 ? 0 : batch.bytes; // an over-count only makes the limit stricter
      if (i > 0) {
        this.metrics.deliveryErrors.labels('PARTIAL_ENQUEUE').inc(i);
        this.log.error({ err, enqueued: i, count }, 'produce failed midway: the points already queued will be delivered; the client gets 500 and may resend them (duplicates, never a loss)');
      } else {
        this.brokerErrors.report({ err });
      }
      return 'produce_failed';
    }
    this.enqueued += count;
    this.enqueuedBytes += batch.bytes;
    return null;
  }

  /**
   * Stops taking points and waits until every queued point is acknowledged or has failed, at most
   * timeoutMs. Returns how many were still outstanding (0 when everything was delivered).
   */
  async drain(timeoutMs: number): Promise<number> {
    this.stopping = true;
    this.updateRefusal();
    if (this.graceTimer !== null) clearTimeout(this.graceTimer);
    if (this.metadataTimer !== null) clearTimeout(this.metadataTimer);
    this.stopProbing();
    if (this.heartbeatTimer !== null) clearInterval(this.heartbeatTimer);
    const deadline = Date.now() + timeoutMs;
    // librdkafka's flush succeeds once its queue is empty: every message acknowledged or failed.
    // Until a flush has said so, count at least one point as outstanding (our count may lag by 100 ms).
    let left = this.connected ? Math.max(1, this.queuedPoints) : this.queuedPoints;
    while (left !== 0 && this.connected && Date.now() < deadline) {
      const timedOut = await new Promise<boolean>((resolve) => {
        this.producer.flush(Math.max(1, Math.min(500, deadline - Date.now())), (err) => resolve(Boolean(err)));
      });
      left = timedOut ? Math.max(1, this.queuedPoints) : 0;
    }
    // Failure reports of the last messages reach JavaScript through the poll loop; give it a turn.
    await new Promise((r) => setTimeout(r, POLL_INTERVAL_MS * 2));
    this.deliveryFailures.flush();
    // What failed is in the journal's write buffer: on disk before the process exits.
    try {
      this.journal.close();
    } catch (err) {
      this.log.error({ err }, 'cannot write the spill journal on shutdown');
    }
    await new Promise<void>((resolve) => {
      if (!this.connected) return resolve();
      this.producer.disconnect(Math.max(1000, deadline - Date.now()), () => resolve());
    });
    this.connected = false;
    return left;
  }

  private connect(): void {
    if (this.stopping) return;
    // librdkafka serves its error callbacks (e.g. "SASL authentication error") only from poll(), and
    // node-rdkafka's poll interval starts after a successful connect: poll meanwhile, or the reason a
    // connection fails would never reach the log.
    const earlyPoll = setInterval(() => {
      if (this.producer.isConnected()) this.producer.poll();
    }, 100);
    this.producer.connect({ topic: this.topic, timeout: 10_000 }, (err, metadata) => {
      clearInterval(earlyPoll);
      if (err) {
        this.connectFailures.report({ brokers: this.config.brokers, err });
        setTimeout(() => this.connect(), RECONNECT_DELAY_MS).unref();
        return;
      }
      this.connected = true;
      this.brokersUp = Math.max(1, this.brokersUp);
      this.downSince = null;
      this.topicReady = hasLeaders(metadata.topics.find((t) => t.name === this.topic));
      this.producer.setPollInterval(POLL_INTERVAL_MS);
      this.startHeartbeat();
      this.log.info({ brokers: this.config.brokers, topic: this.topic, topicReady: this.topicReady }, 'kafka producer connected');
      if (!this.topicReady) this.scheduleMetadataCheck();
      this.updateRefusal();
    });
  }

  /** The topic does not exist yet (auto-creation is the broker's choice): look again until it does. */
  private scheduleMetadataCheck(): void {
    if (this.metadataTimer !== null || this.stopping) return;
    this.metadataTimer = setTimeout(() => {
      this.metadataTimer = null;
      this.producer.getMetadata({ topic: this.topic, timeout: 5_000 }, (err, metadata) => {
        if (!err) this.topicReady = hasLeaders(metadata.topics.find((t) => t.name === this.topic));
        if (!this.topicReady) {
          this.log.warn({ topic: this.topic }, 'topic not found or without leaders; POST /track answers 500 until it exists');
          this.scheduleMetadataCheck();
        }
        this.updateRefusal();
      });
    }, 2_000).unref();
  }

  /** async mode: only failures arrive here. delivered mode: every message, with its ticket. */
  private onDelivery(err: Kafka.LibrdKafkaError | null, report: Kafka.DeliveryReport): void {
    const ticket = report.opaque as DeliveryTicket | undefined;
    if (err) {
      const code = codeName(err.code);
      this.failed++;
      this.metrics.deliveryErrors.labels(code).inc();
      if (ticket !== undefined) {
        // The client hears 500 and resends: not spilled, or it would arrive twice.
        // node-rdkafka's delivery errors carry librdkafka's message but not always its code.
        if (ticket.failed++ === 0) ticket.firstError = err.message;
        this.deliveryFailures.report({ code, message: err.message, partition: report.partition, answered: 500 });
      } else {
        this.deliveryFailures.report({ code, message: err.message, partition: report.partition, spilled: this.spill(report) });
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

  /** The journal lost a batch it could not write (the disk refused). */
  journalWriteFailed(records: number): void {
    this.spilled -= records;
    this.lost += records;
    this.metrics.pointsLost.labels('spill_write_error').inc(records);
    this.updateRefusal();
  }

  private onError(err: Kafka.LibrdKafkaError): void {
    if (err.isFatal) {
      this.fatal = true;
      this.log.fatal({ err }, 'fatal kafka producer error: this worker stops taking points and is replaced (ACK_MODE=async: what failed is spilled)');
      this.updateRefusal();
      this.onFatal?.();
      return;
    }
    if (err.code === Kafka.CODES.ERRORS.ERR__ALL_BROKERS_DOWN) {
      this.brokersUp = 0;
      this.markDown();
    }
    this.brokerErrors.report({ code: codeName(err.code), message: err.message });
  }

  private onStats(json: string): void {
    const stats = JSON.parse(json) as Stats;
    this.statsQueue = stats.msg_cnt;
    this.statsQueueBytes = stats.msg_size;
    this.enqueuedAtStats = this.enqueued;
    this.enqueuedBytesAtStats = this.enqueuedBytes;
    // Acknowledged = enqueued - still queued - failed, as of these statistics.
    const delivered = this.enqueued - stats.msg_cnt - this.failed;
    if (delivered > this.deliveredReported) {
      this.metrics.delivered.inc(delivered - this.deliveredReported);
      this.deliveredReported = delivered;
    }
    let up = 0;
    let p50 = 0;
    let p99 = 0;
    for (const [name, b] of Object.entries(stats.brokers ?? {})) {
      if (b.nodeid < 0) continue; // bootstrap entries; the real brokers are listed by node id
      const broker = String(b.nodeid);
      if (b.state === 'UP') up++;
      // Enqueue to acknowledgement ≈ time in the producer queue + in the request queue + round trip.
      const parts = [b.int_latency, b.outbuf_latency, b.rtt].filter((w): w is Window => w !== undefined && w.cnt > 0);
      if (parts.length === 3) {
        p50 = Math.max(p50, parts.reduce((sum, w) => sum + w.p50, 0));
        p99 = Math.max(p99, parts.reduce((sum, w) => sum + w.p99, 0));
      }
      if (b.rtt !== undefined && b.rtt.cnt > 0) this.metrics.brokerRtt.labels(broker).set(b.rtt.p99 / 1e6);
      this.metrics.brokerInflight.labels(broker).set(b.waitresp_cnt);
      const seen = this.retriesSeen.get(name) ?? 0;
      if (b.txretries > seen) this.metrics.retries.labels(broker).inc(b.txretries - seen);
      this.retriesSeen.set(name, b.txretries);
    }
    this.brokersUp = up;
    this.metrics.brokerUp.set(up);
    this.observeSilence(Object.values(stats.brokers ?? {}));
    if (p99 > 0) {
      this.metrics.deliveryLatencyEstimate.labels('0.5').set(p50 / 1e6);
      this.metrics.deliveryLatencyEstimate.labels('0.99').set(p99 / 1e6);
    }
    const topic = stats.topics?.[this.topic];
    if (topic?.batchcnt !== undefined && topic.batchcnt.cnt > 0) this.metrics.batchSize.set(topic.batchcnt.avg);
    // Only statistics that list the topic's partitions say anything about leaders: right after
    // connecting, the topic appears before its metadata does.
    const partitions = Object.values(topic?.partitions ?? {}).filter((p) => p.partition >= 0);
    if (partitions.length > 0) this.topicReady = partitions.some((p) => p.leader >= 0);
    if (up > 0) {
      this.downSince = null;
      this.stopProbing();
    } else {
      this.markDown();
    }
    this.updateRefusal();
  }

  /**
   * A metadata request every second, one at a time: a worker that produces nothing (the kernel gave
   * its connections to the other workers, or traffic is quiet) still has a request waiting on a
   * broker that stopped answering, and notices the silence as soon as a busy worker does. librdkafka
   * sends each to a broker of its choice, so in a cluster the others keep answering. node-rdkafka's
   * getMetadata holds a libuv threadpool thread while it waits: one at a time, 1 s at most.
   */
  private startHeartbeat(): void {
    if (this.heartbeatTimer !== null) return;
    this.heartbeatTimer = setInterval(() => {
      if (this.heartbeatInFlight || this.stopping) return;
      this.heartbeatInFlight = true;
      this.producer.getMetadata({ topic: this.topic, timeout: HEARTBEAT_INTERVAL_MS }, () => {
        this.heartbeatInFlight = false;
      });
    }, HEARTBEAT_INTERVAL_MS);
    this.heartbeatTimer.unref();
  }

  /** Updates the silence of each broker and whether one stalls the producer (see broker-silence.ts). */
  private observeSilence(brokers: BrokerStats[]): void {
    const now = Date.now();
    this.silence.observe(brokers, now);
    for (const b of this.silence.brokersSilence(now)) this.metrics.brokerSilent.labels(String(b.nodeid)).set(b.silentMs / 1000);
    const stalled = this.silence.stalled(now, this.graceMs);
    if ((stalled === null) === (this.stalledBy === null)) {
      this.stalledBy = stalled;
      return;
    }
    if (stalled !== null) {
      this.log.warn({ broker: stalled.name, silentMs: stalled.silentMs, waiting: stalled.waiting }, `${silenceReason(stalled)}; refusing points until it answers`);
    } else {
      this.log.info({ broker: this.stalledBy?.name }, 'kafka brokers answer again; taking points');
    }
    this.stalledBy = stalled;
    this.metrics.stalled.set(stalled === null ? 0 : 1);
  }

  /**
   * While no broker is up, ask for metadata every second. librdkafka connects only to brokers it
   * has work for, and a worker that refuses every request gives it none: without this, a worker
   * could stay "broker down" long after the cluster came back (seen after a full-cluster outage:
   * one of two workers answered 500 for minutes while the other served).
   */
  private startProbing(): void {
    if (this.probeTimer !== null || this.stopping) return;
    this.probeTimer = setInterval(() => {
      if (this.probing || !this.connected) return;
      this.probing = true;
      this.producer.getMetadata({ topic: this.topic, timeout: 2_000 }, (err, metadata) => {
        this.probing = false;
        if (err || this.probeTimer === null) return;
        this.downSince = null;
        this.brokersUp = Math.max(1, this.brokersUp);
        this.topicReady = hasLeaders(metadata.topics.find((t) => t.name === this.topic));
        this.stopProbing();
        this.updateRefusal();
      });
    }, 1_000);
    this.probeTimer.unref();
  }

  private stopProbing(): void {
    if (this.probeTimer !== null) clearInterval(this.probeTimer);
    this.probeTimer = null;
  }

  private markDown(): void {
    this.startProbing();
    if (this.downSince === null) {
      this.downSince = Date.now();
      // Re-evaluate when the grace period ends even if no further event arrives.
      this.graceTimer ??= setTimeout(() => {
        this.graceTimer = null;
        this.updateRefusal();
      }, this.graceMs + 10).unref();
    }
    this.updateRefusal();
  }

  private updateRefusal(): void {
    const before = this.refusal;
    if (this.stopping) this.refusal = 'shutting_down';
    else if (this.fatal) this.refusal = 'fatal_error';
    else if (!this.connected) this.refusal = 'connecting';
    else if (this.downSince !== null && Date.now() - this.downSince >= this.graceMs) this.refusal = 'broker_down';
    else if (this.stalledBy !== null) this.refusal = 'broker_stalled';
    else if (!this.topicReady) this.refusal = 'topic_unknown';
    else this.refusal = null;
    if (before === this.refusal) return;
    this.log.info({ from: before ?? 'accepting', to: this.refusal ?? 'accepting' }, 'producer state changed');
    if (this.refusal === null) {
      for (const waiter of this.acceptingWaiters) waiter();
      this.acceptingWaiters.clear();
    }
  }
}

function silenceReason(broker: SilentBroker): string {
  return `broker ${broker.name} has answered nothing for ${(broker.silentMs / 1000).toFixed(1)} s (${broker.waiting} requests waiting)`;
}

function hasLeaders(topic: Kafka.TopicMetadata | undefined): boolean {
  return topic !== undefined && topic.partitions.length > 0 && topic.partitions.some((p) => p.leader >= 0);
}

const CODE_NAMES = new Map<number, string>(Object.entries(Kafka.CODES.ERRORS).map(([name, code]) => [code, name]));
function codeName(code: number): string {
  return CODE_NAMES.get(code) ?? `CODE_${code}`;
}
