// The producer of the refused-requests topic (MQ_REFUSED_TOPIC): a librdkafka client of its own,
// beside the points' producer, so that nothing it does can touch the accepted path. Its queue,
// connections and reports are its own: the refused topic deleted, without a leader or slow fills
// this queue and no other; the points' producer never waits for it, and its admission never counts
// its messages.
//
// What it offers: send() hands one message to librdkafka, or says why it did not (its queue full);
// every message's report (delivered, or failed after REFUSED_MESSAGE_TIMEOUT_MS) goes to onReport.
// Best effort by design: these messages are evidence, not data, and are not journalled (README,
// "Refused requests").
//
// Connected only while there are refusals to write. At start it connects once, to say whether the
// topic exists, and closes; the next refusal opens it again (what is refused meanwhile waits, at most
// MQ_REFUSED_RATE × 10 messages), and it closes once nothing was sent for MQ_REFUSED_IDLE_MS and
// every report came. Why: an idle librdkafka client still costs its worker CPU every second (its
// threads' timers, the polls), a share of the accepted path's that a topic used only by bad requests
// should not take.
import Kafka from '@confluentinc/kafka-javascript';
import { Throttled, type Logger } from '../log.js';
import { codeName } from './delivery-reports.js';
import type { ProducerSettings } from './settings.js';

/** One refused request's message. */
export interface RefusedMessage {
  readonly key: string | null;
  readonly value: Buffer;
  readonly headers: readonly Record<string, string>[];
  readonly timestamp: number;
}

/** Why send() wrote nothing. */
export type NotSent = 'unavailable' | 'queue_full';

/** Reports are polled for this often while messages await theirs. */
const POLL_MS = 100;
/** And this often otherwise, while connected (errors and a late report still come). */
const IDLE_POLL_MS = 1_000;
const CONNECT_TIMEOUT_MS = 10_000;
const RECONNECT_MS = 5_000;
/** Refusals wait for a connection at most this many seconds' worth of the rate. */
const WAITING_SECONDS = 10;

type State = 'closed' | 'opening' | 'open' | 'closing';

export interface RefusedProducerOptions {
  /** Closed once nothing was sent for this long and every report came (MQ_REFUSED_IDLE_MS). */
  idleMs: number;
  /** MQ_REFUSED_RATE: what may wait for a connection is WAITING_SECONDS of it. */
  ratePerSecond: number;
}

export class RefusedProducer {
  private readonly producer: Kafka.Producer;
  private state: State = 'closed';
  private stopped = false;
  /** The topic was looked for once connected: at start only. */
  private checked = false;
  private retry: NodeJS.Timeout | null = null;
  private readonly failures: Throttled;
  /** Refusals sent while not connected: produced once it is. */
  private waiting: RefusedMessage[] = [];
  private readonly waitingMax: number;
  /** Messages handed to librdkafka whose report has not come yet. */
  private awaitingReports = 0;
  /** performance.now() of the last send(). */
  private lastSent = 0;
  private pollTimer: NodeJS.Timeout | null = null;
  private pollMs = 0;
  private idleTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly topic: string,
    settings: ProducerSettings,
    private readonly log: Logger,
    /** Each message's report: null when Kafka acknowledged it, else its error's name. */
    private readonly onReport: (error: string | null) => void,
    private readonly options: RefusedProducerOptions,
  ) {
    this.producer = new Kafka.Producer(settings.global, settings.topic);
    this.failures = new Throttled(log, 'warn', `refused requests not written to ${topic}`);
    this.waitingMax = options.ratePerSecond * WAITING_SECONDS;
    this.producer.on('delivery-report', (err) => {
      if (--this.awaitingReports === 0) this.pollEvery(IDLE_POLL_MS);
      const error = err ? codeName(err.code) : null;
      if (error !== null) this.failures.report({ error, topic: this.topic });
      this.onReport(error);
    });
    this.producer.on('event.error', (err) => this.failures.report({ error: codeName(err.code), message: err.message }));
  }

  /** Connects in the background to look for the topic, then closes unless refusals came meanwhile. */
  start(): void {
    this.open();
  }

  send(message: RefusedMessage): NotSent | null {
    if (this.stopped) return 'unavailable';
    this.lastSent = performance.now();
    if (this.state === 'open') return this.produce(message);
    if (this.waiting.length >= this.waitingMax) return 'queue_full';
    this.waiting.push(message);
    if (this.state === 'closed' && this.retry === null) this.open();
    return null;
  }

  private produce(message: RefusedMessage): NotSent | null {
    try {
      this.producer.produce(this.topic, null, message.value, message.key ?? undefined, message.timestamp, undefined, message.headers as Kafka.MessageHeader[]);
      if (this.awaitingReports++ === 0) this.pollEvery(POLL_MS);
      return null;
    } catch (err) {
      const code = (err as Kafka.LibrdKafkaError).code;
      if (code === Kafka.CODES.ERRORS.ERR__QUEUE_FULL) return 'queue_full';
      this.failures.report({ error: codeName(code), message: (err as Error).message });
      return 'unavailable';
    }
  }

  /** Connects, retrying every RECONNECT_MS while there is something to do; then writes what waited. */
  private open(): void {
    this.state = 'opening';
    this.producer.connect({ timeout: CONNECT_TIMEOUT_MS }, (err) => {
      if (this.stopped) {
        if (!err) this.producer.disconnect(1_000, () => undefined);
        return;
      }
      if (err) {
        this.state = 'closed';
        this.failures.report({ error: 'cannot connect', message: err.message });
        this.retry = setTimeout(() => {
          this.retry = null;
          if (!this.stopped && (!this.checked || this.waiting.length > 0)) this.open();
        }, RECONNECT_MS).unref();
        return;
      }
      this.state = 'open';
      this.log.debug({ topic: this.topic, waiting: this.waiting.length }, 'refused-requests producer connected');
      this.pollEvery(IDLE_POLL_MS);
      const waiting = this.waiting;
      this.waiting = [];
      for (const message of waiting) {
        const notSent = this.produce(message);
        if (notSent !== null) this.onReport(notSent);
      }
      this.idleTimer = setInterval(() => this.closeWhenIdle(), this.options.idleMs).unref();
      if (!this.checked) this.checkTopic(() => this.closeWhenIdle());
    });
  }

  /**
   * Says at start when the topic is missing: its messages would only be counted as failed, 30 s after
   * each refusal, and the operator who set MQ_REFUSED_TOPIC expects to find them.
   */
  private checkTopic(then: () => void): void {
    this.producer.getMetadata({ topic: this.topic, timeout: CONNECT_TIMEOUT_MS }, (err, metadata) => {
      this.checked = true;
      if (!err) {
        const found = metadata.topics.find((t) => t.name === this.topic);
        if (found === undefined || found.partitions.length === 0) {
          this.log.warn(
            { topic: this.topic },
            `MQ_REFUSED_TOPIC ${this.topic} does not exist: refused requests are not kept (counted as failed) until it is created`,
          );
        }
      }
      then();
    });
  }

  /** Closes when nothing was sent for idleMs (or ever, after the check at start) and every report came. */
  private closeWhenIdle(): void {
    if (this.state !== 'open' || this.stopped || this.awaitingReports > 0) return;
    if (this.lastSent > 0 && performance.now() - this.lastSent < this.options.idleMs) return;
    this.state = 'closing';
    this.stopTimers();
    this.producer.disconnect(1_000, () => {
      this.state = 'closed';
      this.log.debug({ topic: this.topic }, 'refused-requests producer closed: idle');
      if (!this.stopped && this.waiting.length > 0) this.open();
    });
  }

  private stopTimers(): void {
    if (this.pollTimer !== null) clearInterval(this.pollTimer);
    if (this.idleTimer !== null) clearInterval(this.idleTimer);
    this.pollTimer = this.idleTimer = null;
    this.pollMs = 0;
  }

  private pollEvery(ms: number): void {
    if (ms === this.pollMs || this.state !== 'open') return;
    if (this.pollTimer !== null) clearInterval(this.pollTimer);
    this.pollMs = ms;
    this.pollTimer = setInterval(() => {
      try {
        this.producer.poll();
      } catch (err) {
        this.failures.report({ error: 'cannot poll', message: (err as Error).message }); // not connected: only close and stop disconnect
      }
    }, ms).unref();
  }

  /** Waits, until `deadline` (Date.now()), for what is queued, then disconnects; what still waits for a connection is given up. */
  async stop(deadline: number): Promise<void> {
    this.stopped = true;
    if (this.retry !== null) clearTimeout(this.retry);
    const given = this.waiting.length;
    this.waiting = [];
    for (let i = 0; i < given; i++) this.onReport('shutting down');
    if (this.state !== 'open') return;
    await new Promise<void>((resolve) => this.producer.flush(Math.max(1, deadline - Date.now()), () => resolve()));
    this.stopTimers();
    this.failures.flush();
    await new Promise<void>((resolve) => this.producer.disconnect(1_000, () => resolve()));
    this.state = 'closed';
  }
}
