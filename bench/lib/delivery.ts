// How many messages a benchmark's topic holds: read from the broker's high watermarks, or, for a topic
// written in transactions, counted by a read_committed consumer.
import Kafka from '@confluentinc/kafka-javascript';
import { BROKERS } from '../../support/kafka.js';

/** Messages in the topic (sum of the high watermarks of its 6 partitions; the topic is new). */
export async function topicSize(topic: string): Promise<number> {
  const client = new Kafka.Producer({ 'metadata.broker.list': BROKERS });
  await new Promise<void>((res, rej) => client.connect({ timeout: 15_000 }, (e) => (e ? rej(e) : res())));
  let total = 0;
  for (let p = 0; p < 6; p++) {
    total += await new Promise<number>((res, rej) => client.queryWatermarkOffsets(topic, p, 5_000, (e, o) => (e ? rej(e) : res(o.highOffset))));
  }
  await new Promise<void>((res) => client.disconnect(() => res()));
  return total;
}

/** Waits until the topic holds `expected` messages or stops growing for 5 s (delivery still in progress). */
export async function waitForDelivery(topic: string, expected: number): Promise<void> {
  let last = -1;
  let stableSince = Date.now();
  while (Date.now() - stableSince < 5_000) {
    const n = await topicSize(topic);
    if (n >= expected) return;
    if (n !== last) stableSince = Date.now();
    last = n;
    await new Promise((r) => setTimeout(r, 500));
  }
}

/**
 * Messages of the topic a read_committed consumer reads from its start, counted until `expected` have
 * come and nothing more for a second (duplicates would show as more), or nothing for 5 s (a loss).
 * For a topic written in transactions (DELIVERY=exactly-once): its high watermarks count each
 * transaction's commit marker as well (one offset per partition it wrote), so topicSize() reads more
 * messages than there are and would hide a loss of as many points.
 */
export async function committedCount(topic: string, expected: number): Promise<number> {
  const consumer = new Kafka.KafkaConsumer(
    { 'metadata.broker.list': BROKERS, 'group.id': `bench-count-${topic}`, 'enable.auto.commit': false, 'isolation.level': 'read_committed' },
    { 'auto.offset.reset': 'earliest' },
  );
  await new Promise<void>((res, rej) => consumer.connect({ timeout: 15_000 }, (e) => (e ? rej(e) : res())));
  consumer.assign(Array.from({ length: 6 }, (_, partition) => ({ topic, partition, offset: 0 })));
  let count = 0;
  let lastNew = Date.now();
  try {
    for (;;) {
      const n = await new Promise<number>((res, rej) => consumer.consume(10_000, (e, messages) => (e ? rej(e) : res(messages.length))));
      if (n > 0) lastNew = Date.now();
      count += n;
      const idle = Date.now() - lastNew;
      if ((count >= expected && idle >= 1_000) || idle >= 5_000) return count;
      if (n === 0) await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    await new Promise<void>((res) => consumer.disconnect(() => res()));
  }
}
