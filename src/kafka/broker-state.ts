// What the producer knows about Kafka, and what it answers because of it: whether points can be taken
// (refusal), whether the worker is ready (/readyz), whether what the journal holds may be produced again. A state
// machine fed by events; it does no I/O and reads the time from a clock, so every transition is
// tested without a broker (test/unit/kafka/broker-state.test.ts).
//
//   connecting ──connected──▶ accepting ◀──────────────┐
//        │                    │  │  │                   │ statistics: a broker UP / a metadata answer
//        │     topic missing ─┘  │  └─ all brokers down ─▶ (grace) ─▶ broker_unavailable
//        │     ▶ topic_unknown   │
//        │                       └─ a broker silent, nobody answering ─▶ (grace) ─▶ broker_stalled
//   any state ──fatal error──▶ producer_failed      any state ──stop──▶ shutting_down
//
// Each refusal is a code of the error catalogue (errors.ts); connecting counts as broker_unavailable.
import type { ProducerRefusal } from '../api/errors.js';
import { BrokerSilence, type BrokerStatsSample, type SilentBroker } from './broker-silence.js';

export type BrokerRefusal = Extract<ProducerRefusal, 'broker_unavailable' | 'broker_stalled' | 'topic_unknown' | 'producer_failed' | 'shutting_down'>;

/** How a statistics snapshot changed the stall: a broker now stalls the producer, or the stall ended. */
export type StallChange = { stalled: SilentBroker } | { answering: SilentBroker } | null;

export interface BrokerStateOptions {
  /** MQ_BROKERS, for the reasons given. */
  brokers: string;
  topic: string;
  /** BROKER_DOWN_GRACE_MS */
  graceMs: number;
  clock?: () => number;
}

export class BrokerState {
  private connected = false;
  private fatal = false;
  private stopping = false;
  private topicReady = false;
  private brokersUp = 0;
  /** Since when no broker has been reachable (ms), or null while one is. */
  private downSince: number | null = null;
  private readonly silence = new BrokerSilence();
  /** The silent broker that stalls the producer, or null. */
  private stalledBy: SilentBroker | null = null;
  private readonly clock: () => number;

  constructor(private readonly opts: BrokerStateOptions) {
    this.clock = opts.clock ?? Date.now;
  }

  // ---- events -------------------------------------------------------------------------------

  /** The producer connected; `topicReady`: its metadata lists the topic with a leader. */
  onConnected(topicReady: boolean): void {
    this.connected = true;
    this.brokersUp = Math.max(1, this.brokersUp);
    this.downSince = null;
    this.topicReady = topicReady;
  }

  /** A metadata request looking for the topic was answered. */
  onTopicMetadata(topicReady: boolean): void {
    this.topicReady = topicReady;
  }

  /** A broker answered a metadata request while none was thought reachable. */
  onBrokerAnswered(topicReady: boolean): void {
    this.downSince = null;
    this.brokersUp = Math.max(1, this.brokersUp);
    this.topicReady = topicReady;
  }

  /** librdkafka: all broker connections are down. */
  onAllBrokersDown(): void {
    this.brokersUp = 0;
    this.downSince ??= this.clock();
  }

  onFatalError(): void {
    this.fatal = true;
  }

  onStopping(): void {
    this.stopping = true;
  }

  /**
   * One statistics snapshot: brokers UP, each broker's requests and answers, and the node ids leading
   * the topic's partitions (null when these statistics do not list them).
   */
  onStatistics(brokers: readonly BrokerStatsSample[], leaders: readonly number[] | null): StallChange {
    const now = this.clock();
    const up = brokers.filter((b) => b.nodeid >= 0 && b.state === 'UP').length;
    this.brokersUp = up;
    if (up > 0) this.downSince = null;
    else this.downSince ??= now;
    // Leaders in the statistics show the topic ready as soon as librdkafka knows them. Their absence
    // does not show it missing: librdkafka forgets a partition's leader while it asks for new metadata
    // (seen after a thawed broker: one worker refused points and went unready for a second, until the
    // next metadata answer). Whether the topic exists is for the metadata answers to say.
    if (leaders !== null && leaders.length > 0) this.topicReady = true;
    this.silence.observe(brokers, now);
    const stalled = this.silence.stalled(now, this.opts.graceMs, leaders);
    const before = this.stalledBy;
    this.stalledBy = stalled;
    if (before === null && stalled !== null) return { stalled };
    if (before !== null && stalled === null) return { answering: before };
    return null;
  }

  // ---- what follows from it -----------------------------------------------------------------

  /** No broker is reachable now (a metadata answer then means one is again). */
  get noBrokerReachable(): boolean {
    return this.downSince !== null;
  }

  /** Milliseconds until "no broker" becomes a refusal, or null when no broker is missing. */
  downGraceLeftMs(): number | null {
    return this.downSince === null ? null : Math.max(0, this.downSince + this.opts.graceMs - this.clock());
  }

  /** Why points are refused because of Kafka, or null when they are taken. */
  refusal(): BrokerRefusal | null {
    if (this.stopping) return 'shutting_down';
    if (this.fatal) return 'producer_failed';
    if (!this.connected) return 'broker_unavailable';
    if (this.downSince !== null && this.clock() - this.downSince >= this.opts.graceMs) return 'broker_unavailable';
    if (this.stalledBy !== null) return 'broker_stalled';
    if (!this.topicReady) return 'topic_unknown';
    return null;
  }

  /**
   * Why this worker is not ready because of Kafka, or null: a broker connection and the topic's
   * metadata right now (no grace period), and brokers that answer (a silent broker is a stall once
   * the grace period passed with no answer at all).
   */
  unreadyReason(): string | null {
    if (this.stopping) return 'shutting down';
    if (this.fatal) return 'fatal producer error';
    if (!this.connected) return `not connected to ${this.opts.brokers}`;
    if (this.brokersUp === 0) return 'no broker reachable';
    if (this.stalledBy !== null) return silenceReason(this.stalledBy);
    if (!this.topicReady) return `topic ${this.opts.topic} unknown or without leaders`;
    return null;
  }

  /** Whether Kafka takes points right now (what a journal replay waits for). */
  kafkaAvailable(): boolean {
    return this.unreadyReason() === null;
  }

  /** Every broker seen, with how long it has left requests unanswered (for the metrics). */
  brokersSilence(): SilentBroker[] {
    return this.silence.brokersSilence(this.clock());
  }
}

export function silenceReason(broker: SilentBroker): string {
  return `broker ${broker.name} has answered nothing for ${(broker.silentMs / 1000).toFixed(1)} s (${broker.waiting} requests waiting)`;
}
