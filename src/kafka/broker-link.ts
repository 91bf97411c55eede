// Keeping in touch with the brokers: connecting (and retrying), one metadata request a second for the
// topic, and the timer that ends the grace period. Every answer goes to the BrokerState; `changed` is
// called after each so that the producer recomputes what it refuses.
import type Kafka from '@confluentinc/kafka-javascript';
import { Throttled, type Logger } from '../log.js';
import type { BrokerState } from './broker-state.js';

/** How often librdkafka's callbacks (error reports, statistics) are served to JavaScript. */
export const POLL_INTERVAL_MS = 10;
const RECONNECT_DELAY_MS = 1_000;
/** How often the topic's metadata is asked for (see startMetadataPoll). */
const METADATA_POLL_MS = 1_000;

export interface BrokerLinkOptions {
  brokers: string;
  topic: string;
  log: Logger;
  /** Called after every event that may change what the producer refuses. */
  changed: () => void;
  /** How long one attempt to connect (librdkafka's first metadata request) may take: 10 s. */
  connectTimeoutMs?: number;
}

export class BrokerLink {
  private isConnected = false;
  private stopped = false;
  private readonly connectFailures: Throttled;
  private readonly topicMissing: Throttled;
  private graceTimer: NodeJS.Timeout | null = null;
  private pollTimer: NodeJS.Timeout | null = null;
  private pollInFlight = false;
  private readonly topic: string;
  private readonly log: Logger;

  /** The binding's connection: produceBatch() may be called. */
  get connected(): boolean {
    return this.isConnected;
  }

  constructor(
    private readonly producer: Kafka.Producer,
    private readonly state: BrokerState,
    private readonly opts: BrokerLinkOptions,
  ) {
    this.topic = opts.topic;
    this.log = opts.log;
    this.connectFailures = new Throttled(opts.log, 'warn', 'cannot connect to kafka; retrying');
    this.topicMissing = new Throttled(opts.log, 'warn', 'topic not found or without leaders; POST /track answers 500 until it exists');
  }

  /** Stops every timer; no reconnect or metadata request after this. */
  stop(): void {
    this.stopped = true;
    if (this.graceTimer !== null) clearTimeout(this.graceTimer);
    if (this.pollTimer !== null) clearInterval(this.pollTimer);
  }

  /** Disconnects within timeoutMs (at least 1 s) if connected. */
  async disconnect(timeoutMs: number): Promise<void> {
    if (!this.isConnected) return;
    await new Promise<void>((resolve) => this.producer.disconnect(Math.max(1000, timeoutMs), () => resolve()));
    this.isConnected = false;
  }

  /** Connects in the background and keeps retrying. */
  connect(): void {
    if (this.stopped) return;
    // librdkafka serves its error callbacks (e.g. "SASL authentication error") only from poll(), and
    // The binding's poll interval starts after a successful connect: poll meanwhile, or the reason a
    // connection fails would never reach the log.
    const earlyPoll = setInterval(() => {
      if (this.producer.isConnected()) this.producer.poll();
    }, 100);
    this.producer.connect({ topic: this.topic, timeout: this.opts.connectTimeoutMs ?? 10_000 }, (err, metadata) => {
      clearInterval(earlyPoll);
      if (err) {
        this.connectFailures.report({ brokers: this.opts.brokers, err });
        setTimeout(() => this.connect(), RECONNECT_DELAY_MS).unref();
        return;
      }
      const topicReady = hasLeaders(metadata, this.topic);
      this.isConnected = true;
      this.state.onConnected(topicReady);
      this.producer.setPollInterval(POLL_INTERVAL_MS);
      this.startMetadataPoll();
      this.log.info({ brokers: this.opts.brokers, topic: this.topic, topicReady }, 'kafka producer connected');
      if (!topicReady) this.topicMissing.report({ topic: this.topic });
      this.opts.changed();
    });
  }

  /**
   * The topic's metadata, asked for every second, one request at a time. Its answers tell that the
   * topic exists (auto-creation is the broker's choice, so it is looked for until it does) and that a
   * broker answers while none is thought reachable: librdkafka connects only to brokers it has work
   * for, and a worker that refuses every request gives it none (seen after a full-cluster outage: one
   * of two workers answered 500 for minutes while the other served). A request that gets no answer
   * leaves one waiting on its broker, so a worker that produces nothing still notices a silent broker
   * (broker-silence.ts); librdkafka picks the broker of each request, so in a cluster the others keep
   * answering. The binding's getMetadata holds a libuv threadpool thread while it waits: one at a
   * time, 1 s at most.
   */
  private startMetadataPoll(): void {
    if (this.pollTimer !== null) return;
    this.pollTimer = setInterval(() => {
      if (this.pollInFlight || this.stopped) return;
      this.pollInFlight = true;
      this.producer.getMetadata({ topic: this.topic, timeout: METADATA_POLL_MS }, (err, metadata) => {
        this.pollInFlight = false;
        if (err || this.stopped) return;
        const topicReady = hasLeaders(metadata, this.topic);
        if (this.state.noBrokerReachable) this.state.onBrokerAnswered(topicReady);
        else this.state.onTopicMetadata(topicReady);
        if (!topicReady) this.topicMissing.report({ topic: this.topic });
        this.opts.changed();
      });
    }, METADATA_POLL_MS);
    this.pollTimer.unref();
  }

  /**
   * While no broker is reachable, re-evaluates when the grace period ends even if no further event
   * arrives; then recomputes the refusal.
   */
  followBrokerReachability(): void {
    const left = this.state.downGraceLeftMs();
    if (left !== null && left > 0) {
      this.graceTimer ??= setTimeout(() => {
        this.graceTimer = null;
        this.opts.changed();
      }, left + 10).unref();
    }
    this.opts.changed();
  }
}

/** Whether metadata lists the topic with a leader for at least one partition. */
export function hasLeaders(metadata: Kafka.Metadata, topic: string): boolean {
  const t = metadata.topics.find((candidate) => candidate.name === topic);
  return t !== undefined && t.partitions.length > 0 && t.partitions.some((p) => p.leader >= 0);
}
