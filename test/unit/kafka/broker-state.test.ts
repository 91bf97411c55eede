// The producer's knowledge of Kafka and what follows from it, transition by transition, without a
// broker: events in, refusal / readiness / replay permission out, on a clock the test moves.
import { describe, expect, it } from 'vitest';
import type { BrokerStatsSample } from '../../../src/kafka/broker-silence.js';
import { BrokerState } from '../../../src/kafka/broker-state.js';

const GRACE = 5_000;

function machine() {
  let now = 1_000_000;
  const state = new BrokerState({ brokers: '127.0.0.1:9092', topic: 't', graceMs: GRACE, clock: () => now });
  return {
    state,
    advance(ms: number) {
      now += ms;
    },
    /**
     * Statistics every 100 ms for `ms`, as `at` describes the brokers at each time offset; the topic's
     * partitions led by broker 1 (true), without a leader (false), or not listed (null), or by `leaders`.
     */
    stats(ms: number, at: (t: number) => BrokerStatsSample[], topicLeader: boolean | null = true, leaders?: number[]) {
      const ids = leaders ?? (topicLeader === null ? null : topicLeader ? [1] : []);
      const changes = [];
      for (let t = 0; t < ms; t += 100) {
        changes.push(state.onStatistics(at(t), ids));
        now += 100;
      }
      return changes.filter((c) => c !== null);
    },
    view: () => ({ refusal: state.refusal(), unready: state.unreadyReason(), available: state.kafkaAvailable() }),
  };
}

const up = (rx: number, waiting = 0): BrokerStatsSample => ({ name: '127.0.0.1:9092/1', nodeid: 1, state: 'UP', waitresp_cnt: waiting, rx });
const down = (): BrokerStatsSample => ({ name: '127.0.0.1:9092/1', nodeid: 1, state: 'CONNECT', waitresp_cnt: 0, rx: 0 });

describe('BrokerState', () => {
  it('refuses while connecting, accepts once connected to a topic with leaders', () => {
    const m = machine();
    expect(m.view()).toEqual({ refusal: 'broker_unavailable', unready: 'not connected to 127.0.0.1:9092', available: false });
    m.state.onConnected(true);
    expect(m.view()).toEqual({ refusal: null, unready: null, available: true });
  });

  it('refuses while the topic is unknown, and accepts when metadata or statistics show a leader', () => {
    const m = machine();
    m.state.onConnected(false);
    expect(m.view()).toEqual({ refusal: 'topic_unknown', unready: 'topic t unknown or without leaders', available: false });
    // Statistics that do not list the topic's partitions, or list them without leaders, say nothing.
    m.stats(100, () => [up(1)], null);
    m.stats(100, () => [up(2)], false);
    expect(m.view().refusal).toBe('topic_unknown');
    m.stats(100, () => [up(3)], true);
    expect(m.view()).toEqual({ refusal: null, unready: null, available: true });
    m.state.onTopicMetadata(false);
    expect(m.view().refusal).toBe('topic_unknown');
    m.state.onTopicMetadata(true);
    expect(m.view().refusal).toBeNull();
  });

  it('keeps taking points while librdkafka forgets the leaders it is refreshing: only a metadata answer says the topic is gone', () => {
    const m = machine();
    m.state.onConnected(true);
    m.stats(2_000, (t) => [up(10 + t)], false);
    expect(m.view()).toEqual({ refusal: null, unready: null, available: true });
  });

  it('with no broker reachable: unready at once, refusing only after the grace period, accepting again when one is up', () => {
    const m = machine();
    m.state.onConnected(true);
    m.state.onAllBrokersDown();
    expect(m.state.noBrokerReachable).toBe(true);
    expect(m.view()).toEqual({ refusal: null, unready: 'no broker reachable', available: false });
    expect(m.state.downGraceLeftMs()).toBe(GRACE);
    m.advance(GRACE - 1);
    expect(m.view().refusal).toBeNull();
    m.advance(1);
    expect(m.view().refusal).toBe('broker_unavailable');
    expect(m.state.downGraceLeftMs()).toBe(0);
    m.stats(100, () => [up(5)]);
    expect(m.view()).toEqual({ refusal: null, unready: null, available: true });
    expect(m.state.noBrokerReachable).toBe(false);
  });

  it('statistics without any broker UP start the grace period too; a metadata answer ends it', () => {
    const m = machine();
    m.state.onConnected(true);
    m.stats(GRACE + 100, () => [down()]);
    expect(m.view().refusal).toBe('broker_unavailable');
    m.state.onBrokerAnswered(true);
    expect(m.view()).toEqual({ refusal: null, unready: null, available: true });
  });

  it('a broker that keeps its connection and answers nothing stalls the producer after the grace period, and the first answer ends it', () => {
    const m = machine();
    m.state.onConnected(true);
    m.stats(1_000, (t) => [up(t, 3)]);
    const frozen = m.stats(GRACE + 200, () => [up(900, 5)]);
    expect(frozen).toHaveLength(1);
    expect(frozen[0]).toMatchObject({ stalled: { name: '127.0.0.1:9092/1', waiting: 5 } });
    expect(m.view().refusal).toBe('broker_stalled');
    expect(m.view().unready).toMatch(/^broker 127\.0\.0\.1:9092\/1 has answered nothing for 5\.\d s \(5 requests waiting\)$/);
    expect(m.view().available).toBe(false);
    expect(m.state.brokersSilence()[0]?.silentMs).toBeGreaterThanOrEqual(GRACE);
    const thawed = m.stats(100, () => [up(901, 5)]);
    expect(thawed).toEqual([{ answering: expect.objectContaining({ name: '127.0.0.1:9092/1' }) }]);
    expect(m.view()).toEqual({ refusal: null, unready: null, available: true });
  });

  it('a worker whose only requests wait on a silent broker is not stalled while another broker leads partitions', () => {
    const m = machine();
    m.state.onConnected(true);
    const brokers = (silentRx: number) => [
      { name: '127.0.0.1:19092/1', nodeid: 1, state: 'UP', waitresp_cnt: 0, rx: 50 },
      { name: '127.0.0.1:29092/2', nodeid: 2, state: 'UP', waitresp_cnt: 1, rx: silentRx },
    ];
    // Broker 2 frozen; broker 1 idle (this worker refuses, so it sends it nothing) but leads partitions.
    expect(m.stats(GRACE + 500, () => brokers(7), true, [1, 2])).toEqual([]);
    expect(m.view()).toEqual({ refusal: null, unready: null, available: true });
    // Once only the silent broker leads, nothing can be delivered: stalled.
    expect(m.stats(100, () => brokers(7), true, [2])).toEqual([{ stalled: expect.objectContaining({ nodeid: 2 }) }]);
    expect(m.view().refusal).toBe('broker_stalled');
  });

  it('a fatal error refuses for good, and stopping wins over everything', () => {
    const m = machine();
    m.state.onConnected(true);
    m.state.onFatalError();
    expect(m.view()).toEqual({ refusal: 'producer_failed', unready: 'fatal producer error', available: false });
    m.stats(100, () => [up(1)]);
    expect(m.view().refusal).toBe('producer_failed');
    m.state.onStopping();
    expect(m.view()).toEqual({ refusal: 'shutting_down', unready: 'shutting down', available: false });
  });

  it('the broker being down outranks a stall, which outranks an unknown topic', () => {
    const m = machine();
    m.state.onConnected(false);
    m.stats(GRACE + 200, () => [up(1, 5)], null);
    expect(m.view().refusal).toBe('broker_stalled');
    m.state.onAllBrokersDown();
    m.advance(GRACE);
    expect(m.view().refusal).toBe('broker_unavailable');
  });
});
