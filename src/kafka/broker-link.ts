// Keeping in touch with the brokers: connecting (and retrying), looking for the topic until it exists,
// asking for metadata while no broker is reachable, the heartbeat that makes a silent broker visible
// to an idle worker, and the timer that ends the grace period. Every answer goes to the BrokerState;
// `changed` is called after each so that the producer recomputes what it refuses.
import type Kafka from 'node-rdkafka';
import { Throttled, type Logger } from '../log.js';
import type { BrokerState } from './broker-state.js';

/** How often librdkafka's callbacks (error reports, statistics) are served to JavaScript. */
export const POLL_INTERVAL_MS = 10;
const RECONNECT_DELAY_MS = 1_000;
/** A metadata request this often keeps a silent broker visible to an idle worker (startHeartbeat). */
const HEARTBEAT_INTERVAL_MS = 1_000;

export interface BrokerLinkOptions {
  brokers: string;
  topic: string;
  log: Logger;
  /** Called after every event that may change what the producer refuses. */
  changed: () => void;
}

export class BrokerLink {
  /** node-rdkafka's connection: produce() may be called. */
  connected = false;
  private stopped = false;
  private readonly connectFailures: Throttled;
  private graceTimer: NodeJS.Timeout | null = null;
  private metadataTimer: NodeJS.Timeout | null = null;
  private probeTimer: NodeJS.Timeout | null = null;
  private probing = false;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private heartbeatInFlight = false;
  private readonly topic: string;
  private readonly log: Logger;

  constructor(
    private readonly producer: Kafka.Producer,
    private readonly state: BrokerState,
    private readonly opts: BrokerLinkOptions,
  ) {
    this.topic = opts.topic;
    this.log = opts.log;
    this.connectFailures = new Throttled(opts.log, 'warn', 'cannot connect to kafka; retrying');
  }

  /** Stops every timer; no reconnect, probe or heartbeat after this. */
  stop(): void {
    this.stopped = true;
    for (const timer of [this.graceTimer, this.metadataTimer]) if (timer !== null) clearTimeout(timer);
    if (this.heartbeatTimer !== null) clearInterval(this.heartbeatTimer);
    this.stopProbing();
  }

  /** Disconnects within timeoutMs (at least 1 s) if connected. */
  async disconnect(timeoutMs: number): Promise<void> {
    if (!this.connected) return;
    await new Promise<void>((resolve) => this.producer.disconnect(Math.max(1000, timeoutMs), () => resolve()));
    this.connected = false;
  }

  /** Connects in the background and keeps retrying. */
  connect(): void {
    if (this.stopped) return;
    // librdkafka serves its error callbacks (e.g. "SASL authentication error") only from poll(), and
    // node-rdkafka's poll interval starts after a successful connect: poll meanwhile, or the reason a
    // connection fails would never reach the log.
    const earlyPoll = setInterval(() => {
      if (this.producer.isConnected()) this.producer.poll();
    }, 100);
    this.producer.connect({ topic: this.topic, timeout: 10_000 }, (err, metadata) => {
      clearInterval(earlyPoll);
      if (err) {
        this.connectFailures.report({ brokers: this.opts.brokers, err });
        setTimeout(() => this.connect(), RECONNECT_DELAY_MS).unref();
        return;
      }
      const topicReady = hasLeaders(metadata, this.topic);
      this.connected = true;
      this.state.onConnected(topicReady);
      this.producer.setPollInterval(POLL_INTERVAL_MS);
      this.startHeartbeat();
      this.log.info({ brokers: this.opts.brokers, topic: this.topic, topicReady }, 'kafka producer connected');
      if (!topicReady) this.scheduleMetadataCheck();
      this.opts.changed();
    });
  }

  /** The topic does not exist yet (auto-creation is the broker's choice): look again until it does. */
  private scheduleMetadataCheck(): void {
    if (this.metadataTimer !== null || this.stopped) return;
    this.metadataTimer = setTimeout(() => {
      this.metadataTimer = null;
      this.producer.getMetadata({ topic: this.topic, timeout: 5_000 }, (err, metadata) => {
        if (!err) this.state.onTopicMetadata(hasLeaders(metadata, this.topic));
        if (!this.state.topicKnown) {
          this.log.warn({ topic: this.topic }, 'topic not found or without leaders; POST /track answers 500 until it exists');
          this.scheduleMetadataCheck();
        }
        this.opts.changed();
      });
    }, 2_000).unref();
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
      if (this.heartbeatInFlight || this.stopped) return;
      this.heartbeatInFlight = true;
      this.producer.getMetadata({ topic: this.topic, timeout: HEARTBEAT_INTERVAL_MS }, () => {
        this.heartbeatInFlight = false;
      });
    }, HEARTBEAT_INTERVAL_MS);
    this.heartbeatTimer.unref();
  }

  /**
   * While no broker is up, ask for metadata every second. librdkafka connects only to brokers it
   * has work for, and a worker that refuses every request gives it none: without this, a worker
   * could stay "broker down" long after the cluster came back (seen after a full-cluster outage:
   * one of two workers answered 500 for minutes while the other served).
   */
  private startProbing(): void {
    if (this.probeTimer !== null || this.stopped) return;
    this.probeTimer = setInterval(() => {
      if (this.probing || !this.connected) return;
      this.probing = true;
      this.producer.getMetadata({ topic: this.topic, timeout: 2_000 }, (err, metadata) => {
        this.probing = false;
        if (err || this.probeTimer === null) return;
        this.state.onBrokerAnswered(hasLeaders(metadata, this.topic));
        this.stopProbing();
        this.opts.changed();
      });
    }, 1_000);
    this.probeTimer.unref();
  }

  private stopProbing(): void {
    if (this.probeTimer !== null) clearInterval(this.probeTimer);
    this.probeTimer = null;
  }

  /**
   * Probes while no broker is reachable, and re-evaluates when the grace period ends even if no
   * further event arrives; then recomputes the refusal.
   */
  followBrokerReachability(): void {
    if (this.state.noBrokerReachable) {
      this.startProbing();
      const left = this.state.downGraceLeftMs();
      if (left !== null && left > 0) {
        this.graceTimer ??= setTimeout(() => {
          this.graceTimer = null;
          this.opts.changed();
        }, left + 10).unref();
      }
    } else {
      this.stopProbing();
    }
    this.opts.changed();
  }
}

/** Whether metadata lists the topic with a leader for at least one partition. */
function hasLeaders(metadata: Kafka.Metadata, topic: string): boolean {
  const t = metadata.topics.find((candidate) => candidate.name === topic);
  return t !== undefined && t.partitions.length > 0 && t.partitions.some((p) => p.leader >= 0);
}
