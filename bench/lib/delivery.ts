// How many messages a benchmark's topic holds, read from the broker's high watermarks.
import Kafka from 'node-rdkafka';
import { BROKERS } from '../../support/kafka.js';

/** Messages in the topic (sum of the high watermarks of its 6 partitions; the topic is new). */
export async function topicSize(topic: string): Promise<number> {
  const client = new Kafka.Producer({ 'metadata.broker.list': BROKERS });
  await new Promise<void>((res, rej) => client.connect({ timeout: 15_000 }, (e) => (e ? rej(e) : res())));
  let total = 0;
  for (let p = 0; p < 6; p++) {
    total += await new Promise<number>((res, rej) =>
      client.queryWatermarkOffsets(topic, p, 5_000, (e, o) => (e ? rej(e) : res(o.highOffset))),
    );
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

