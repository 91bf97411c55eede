// The stalled-broker detector, fed librdkafka-shaped statistics snapshots every 100 ms.
import { describe, expect, it } from 'vitest';
import { BrokerSilence, type BrokerStatsSample } from '../../../src/kafka/broker-silence.js';

const GRACE = 5_000;
const b = (nodeid: number, waitresp: number, rx: number, state = 'UP'): BrokerStatsSample => ({
  name: `127.0.0.1:${nodeid}9092/${nodeid}`,
  nodeid,
  state,
  waitresp_cnt: waitresp,
  rx,
});

/** Feeds a snapshot every 100 ms from `from` to `to` (ms), with the brokers `at` gives for each time. */
function feed(s: BrokerSilence, from: number, to: number, at: (t: number) => BrokerStatsSample[]): void {
  for (let t = from; t <= to; t += 100) s.observe(at(t), t);
}

describe('BrokerSilence', () => {
  it('never calls a broker that answers under load silent', () => {
    const s = new BrokerSilence();
    feed(s, 0, 20_000, (t) => [b(1, 5, t / 10)]);
    expect(s.stalled(20_000, GRACE)).toBeNull();
    expect(s.brokersSilence(20_000)[0]!.silentMs).toBe(0);
  });

  it('does not count an idle broker (nothing waiting) as silent, however long it says nothing', () => {
    const s = new BrokerSilence();
    feed(s, 0, 60_000, () => [b(1, 0, 42)]);
    expect(s.stalled(60_000, GRACE)).toBeNull();
  });

  it('a broker that stops answering while requests wait stalls the producer after the grace period, not before', () => {
    const s = new BrokerSilence();
    feed(s, 0, 1_000, (t) => [b(1, 3, t)]); // answering; its last answer arrives at 1,000
    feed(s, 1_100, 5_900, () => [b(1, 5, 1_000)]);
    expect(s.stalled(5_900, GRACE)).toBeNull();
    feed(s, 6_000, 6_200, () => [b(1, 5, 1_000)]);
    expect(s.stalled(6_200, GRACE)).toEqual({ name: '127.0.0.1:19092/1', nodeid: 1, silentMs: 5_200, waiting: 5 });
  });

  it('is no longer stalled with the first answer', () => {
    const s = new BrokerSilence();
    feed(s, 0, 10_000, () => [b(1, 5, 7)]);
    expect(s.stalled(10_000, GRACE)).not.toBeNull();
    s.observe([b(1, 5, 8)], 10_100);
    expect(s.stalled(10_100, GRACE)).toBeNull();
    expect(s.brokersSilence(10_100)[0]!.silentMs).toBe(0);
  });

  it('one silent broker of three does not stall the producer while the others answer, but is reported', () => {
    const s = new BrokerSilence();
    feed(s, 0, 30_000, (t) => [b(1, 2, t), b(2, 5, 100), b(3, 1, t)]);
    expect(s.stalled(30_000, GRACE)).toBeNull();
    expect(s.brokersSilence(30_000).map((x) => [x.nodeid, x.silentMs])).toEqual([
      [2, 30_000],
      [1, 0],
      [3, 0],
    ]);
  });

  it('stalls when every broker holds its requests (acks=all waiting for a frozen follower)', () => {
    const s = new BrokerSilence();
    feed(s, 0, 6_000, () => [b(1, 5, 10), b(2, 5, 20), b(3, 5, 30)]);
    expect(s.stalled(6_000, GRACE)?.silentMs).toBe(6_000);
  });

  it('with the partition leaders known, stalls only while every leader is silent', () => {
    const s = new BrokerSilence();
    feed(s, 0, 6_000, () => [b(1, 0, 10), b(2, 5, 20)]);
    expect(s.stalled(6_000, GRACE, [1, 2])).toBeNull();
    expect(s.stalled(6_000, GRACE, [2])?.nodeid).toBe(2);
    expect(s.stalled(6_000, GRACE)?.nodeid).toBe(2);
  });

  it('is no longer stalled once librdkafka re-created the broker (its counters start again from zero)', () => {
    const s = new BrokerSilence();
    feed(s, 0, 1_000, (t) => [b(1, 5, 5_000 + t)]);
    feed(s, 1_100, 12_000, () => [b(1, 5, 6_000)]); // frozen
    expect(s.stalled(12_000, GRACE)).not.toBeNull();
    // Removed after a metadata answer that listed no broker, then added back: rx counts from zero,
    // and its first snapshot is an answer although rx is below the one seen before.
    s.observe([b(1, 1, 3)], 12_100);
    expect(s.stalled(12_100, GRACE)).toBeNull();
    expect(s.brokersSilence(12_100)[0]!.silentMs).toBe(0);
  });

  it('forgets a broker that librdkafka no longer lists: it holds no requests', () => {
    const s = new BrokerSilence();
    feed(s, 0, 10_000, () => [b(1, 5, 7)]);
    expect(s.stalled(10_000, GRACE)).not.toBeNull();
    s.observe([], 10_100);
    expect(s.stalled(10_100, GRACE)).toBeNull();
    expect(s.brokersSilence(10_100)).toEqual([]);
  });

  it('leaves brokers that are not UP to the connection state, and ignores bootstrap entries', () => {
    const s = new BrokerSilence();
    feed(s, 0, 10_000, () => [b(1, 5, 7, 'CONNECT'), { ...b(-1, 5, 0), name: '127.0.0.1:9092/bootstrap' }]);
    expect(s.stalled(10_000, GRACE)).toBeNull();
    expect(s.brokersSilence(10_000).map((x) => x.nodeid)).toEqual([1]);
  });
});
