// At least once and delivered: while the journal holds records Kafka does not have, every poll reads
// Kafka's acknowledgements (counted per record by librdkafka: no report per message), marks each
// record done (its segment deleted once all its records are), then gives replay its turn (replay.ts).
import type { KafkaProducer } from '../kafka/producer.js';
import type { WorkerMetrics } from '../metrics/metrics.js';
import type { SinkOptions } from './acceptance.js';
import { aPollLater, EveryPoll } from './every-poll.js';
import type { Ledger } from './ledger.js';
import { Replay } from './replay.js';

/**
 * A sink's producer, its replay and the poll of its acknowledgements, wired to each other: what the
 * producer reports failed is produced again, and Kafka taking points again starts the poll.
 */
export function followedProducer(
  { config, metrics, producer, events }: SinkOptions,
  ledger: Ledger,
): { producer: KafkaProducer; replay: Replay; acks: AckFollower } {
  const kafka = producer({
    onFailed: (message) => replay.fail(message),
    onAccepting: () => {
      if (!acks.emptied) acks.follow();
    },
    onFatal: (fenced) => events.onFatal(fenced),
  });
  // Replay takes librdkafka's queue up to half the limit: new requests keep the other half.
  const replay = new Replay(
    ledger,
    { produce: (batch, tag, timestamp) => kafka.produce(batch, tag, timestamp), queueLength: () => kafka.queuedPoints, kafkaAvailable: () => kafka.available },
    Math.ceil(config.queueMaxPoints / 2),
  );
  const acks = new AckFollower(ledger, () => kafka.takeAcks(), replay, metrics);
  return { producer: kafka, replay, acks };
}

export class AckFollower {
  private readonly poll = new EveryPoll(() => this.pass());

  constructor(
    private readonly ledger: Ledger,
    /** Pairs of (record id, points acknowledged) since the last call; undefined while not connected. */
    private readonly takeAcks: () => Uint32Array | undefined,
    private readonly replay: Replay,
    private readonly metrics: WorkerMetrics,
  ) {}

  /** Whether the journal holds nothing Kafka has not acknowledged: nothing in flight, left to read back, or to retry. */
  get emptied(): boolean {
    const { journal } = this.ledger;
    return journal.records === 0 && !journal.recovering && this.replay.backlog === 0;
  }

  /** Polls from now on, until emptied; cheap when already polling. */
  follow(): void {
    this.poll.follow();
  }

  /** After the producer's last flush: the last reports and acknowledgements taken, and the poll stopped. */
  async finish(): Promise<void> {
    await aPollLater();
    this.pass();
    this.poll.stop();
  }

  private pass(): boolean {
    const acks = this.takeAcks();
    if (acks !== undefined) {
      let acknowledged = 0;
      const now = performance.now();
      for (let i = 0; i < acks.length; i += 2) {
        const n = acks[i + 1]!;
        acknowledged += n;
        const done = this.ledger.acknowledged(acks[i]!, n);
        if (done !== null) this.metrics.deliveryLatency.observe((now - done.producedAt) / 1000);
      }
      this.metrics.delivered.inc(acknowledged);
      this.replay.acknowledged();
      this.ledger.journal.flushMarks();
    }
    this.replay.pass();
    return !this.emptied;
  }
}
