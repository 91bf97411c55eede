// The producer of the refused-requests topic (MQ_REFUSED_TOPIC): a librdkafka client of its own,
// beside the points' producer, so that nothing it does can touch the accepted path. Its queue,
// connections and reports are its own: the refused topic deleted, without a leader or slow fills
// this queue and no other; the points' producer never waits for it, and its admission never counts
// its messages.
//
// What it offers: send() hands one message to librdkafka, or says why it did not (not connected,
// its queue full); every message's report (delivered, or failed after REFUSED_MESSAGE_TIMEOUT_MS)
// goes to onReport. Best effort by design: these messages are evidence, not data, and are not
// journalled (README, "Refused requests").
import Kafka from 'node-rdkafka';
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
/**
 * And this often otherwise (errors and a late report still come). Polled every 100 ms, the idle
 * producer cost its worker 1.4 to 1.7 ms of CPU a second, 1 to 2 % of a worker's CPU under 5,000
 * to 10,000 one-point requests a second; issue 47 allows the accepted path 1 % for the topic
 * (bench/HISTORY.md, 2026-11-29).
 */
const IDLE_POLL_MS = 1_000;
const CONNECT_TIMEOUT_MS = 10_000;
const RECONNECT_MS = 5_000;

export class RefusedProducer {
  private readonly producer: Kafka.Producer;
  private connected = false;
  private stopped = false;
  private retry: NodeJS.Timeout | null = null;
  private readonly failures: Throttled;
  private readonly connectedWaiters = new Set<() => void>();
  /** Messages handed to librdkafka whose report has not come yet. */
  private awaitingReports = 0;
  private pollTimer: NodeJS.Timeout | null = null;
  private pollMs = 0;

  constructor(
    private readonly topic: string,
    settings: ProducerSettings,
    private readonly log: Logger,
    /** Each message's report: null when Kafka acknowledged it, else its error's name. */
    private readonly onReport: (error: string | null) => void,
  ) {
    this.producer = new Kafka.Producer(settings.global, settings.topic);
    this.failures = new Throttled(log, 'warn', `refused requests not written to ${topic}`);
    this.producer.on('delivery-report', (err) => {
      if (--this.awaitingReports === 0) this.pollEvery(IDLE_POLL_MS);
      const error = err ? codeName(err.code) : null;
      if (error !== null) this.failures.report({ error, topic: this.topic });
      this.onReport(error);
    });
    this.producer.on('event.error', (err) => this.failures.report({ error: codeName(err.code), message: err.message }));
  }

  /** Connects in the background, retrying every 5 s; send() says 'unavailable' until then. */
  start(): void {
    if (this.stopped) return;
    this.producer.connect({ timeout: CONNECT_TIMEOUT_MS }, (err) => {
      if (this.stopped) return;
      if (err) {
        this.failures.report({ error: 'cannot connect', message: err.message });
        this.retry = setTimeout(() => this.start(), RECONNECT_MS).unref();
        return;
      }
      this.connected = true;
      this.pollEvery(this.awaitingReports > 0 ? POLL_MS : IDLE_POLL_MS);
      for (const waiter of this.connectedWaiters) waiter();
      this.connectedWaiters.clear();
      this.log.debug({ topic: this.topic }, 'refused-requests producer connected');
      this.checkTopic();
    });
  }

  /**
   * Says at start when the topic is missing: its messages would only be counted as failed, 30 s after
   * each refusal, and the operator who set MQ_REFUSED_TOPIC expects to find them.
   */
  private checkTopic(): void {
    this.producer.getMetadata({ topic: this.topic, timeout: CONNECT_TIMEOUT_MS }, (err, metadata) => {
      if (err) return;
      const found = metadata.topics.find((t) => t.name === this.topic);
      if (found === undefined || found.partitions.length === 0) {
        this.log.warn({ topic: this.topic }, `MQ_REFUSED_TOPIC ${this.topic} does not exist: refused requests are not kept (counted as failed) until it is created`);
      }
    });
  }

  /** Resolves once connected, or after timeoutMs: the worker listens once both producers can take messages. */
  whenConnected(timeoutMs: number): Promise<void> {
    if (this.connected) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.connectedWaiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      this.connectedWaiters.add(done);
    });
  }

  send(message: RefusedMessage): NotSent | null {
    if (!this.connected) return 'unavailable';
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

  private pollEvery(ms: number): void {
    if (ms === this.pollMs || !this.connected) return;
    if (this.pollTimer !== null) clearInterval(this.pollTimer);
    this.pollMs = ms;
    this.pollTimer = setInterval(() => {
      try {
        this.producer.poll();
      } catch (err) {
        this.failures.report({ error: 'cannot poll', message: (err as Error).message }); // not connected: only stop() disconnects
      }
    }, ms).unref();
  }

  /** Waits, until `deadline` (Date.now()), for what is queued, then disconnects. */
  async stop(deadline: number): Promise<void> {
    this.stopped = true;
    if (this.retry !== null) clearTimeout(this.retry);
    if (!this.connected) return;
    await new Promise<void>((resolve) => this.producer.flush(Math.max(1, deadline - Date.now()), () => resolve()));
    if (this.pollTimer !== null) clearInterval(this.pollTimer);
    this.failures.flush();
    await new Promise<void>((resolve) => this.producer.disconnect(1_000, () => resolve()));
    this.connected = false;
  }
}
