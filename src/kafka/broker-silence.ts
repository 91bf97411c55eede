// Notices a broker that keeps its connections open but stops answering: a frozen VM, a long GC pause,
// a network path that drops packets. librdkafka sees nothing wrong there for socket.timeout.ms
// (60 s by default): the connection is UP, requests are sent and simply never answered.
//
// The signal, from librdkafka's statistics of each broker (STATISTICS.md):
//   waitresp_cnt  requests sent and awaiting a response;
//   rx            responses received since the client started.
// A broker is silent while waitresp_cnt > 0 and rx does not move. Measured with a broker stopped by
// SIGSTOP under load: waitresp_cnt stayed at 5 (max.in.flight for idempotence) and rx froze within one
// 100 ms statistics interval; a healthy broker under the same load answers within milliseconds.
//
// The producer is stalled when some broker has been silent for the grace period, no broker has answered
// anything in that time, and every broker that leads a partition of the topic is silent. A Kafka broker
// handles one request per connection at a time, so a produce request held by acks=all (a leader waiting
// for a frozen follower) also holds the metadata requests behind it: "no answer from anyone" is what a
// client sees then, too. As soon as any broker answers again, the producer is not stalled: it can
// deliver, and what is queued for the silent broker's partitions is bounded by the producer queue
// limits. The leaders matter for a worker that refuses: it then sends nothing but its metadata
// requests, and when librdkafka keeps sending those to the silent broker, "no answer" lasted as long as
// the freeze (measured: one worker of two refused for 30 s and more while the other served) although
// other leaders would have taken its points.

/** The fields of one entry of librdkafka's `brokers` statistics this module reads. */
export interface BrokerStatsSample {
  /** "host:port/nodeid" */
  name: string;
  nodeid: number;
  state: string;
  waitresp_cnt: number;
  rx: number;
}

export interface SilentBroker {
  name: string;
  nodeid: number;
  silentMs: number;
  waiting: number;
}

interface Seen {
  nodeid: number;
  rx: number;
  /** Since when requests have been waiting with no response received (ms), or null. */
  silentSince: number | null;
  waiting: number;
}

export class BrokerSilence {
  private readonly brokers = new Map<string, Seen>();
  /** When a broker last answered anything (ms); starts at the first statistics. */
  private lastAnswer: number | null = null;

  /**
   * One statistics snapshot (`now` in ms). Bootstrap entries (nodeid < 0) are not brokers.
   *
   * librdkafka (since 2.10) removes a broker that a metadata answer leaves out, and adds it back, its
   * counters from zero, once an answer lists it again. A KRaft broker thawed after more than its
   * session timeout is fenced by the controller for 5-25 ms (the broker's log), and a fenced broker is
   * left out of metadata answers. In freeze tests a worker sometimes lost its brokers at the thaw, and
   * its stall never ended (the remembered entry kept its silence; no answer counted): it refused
   * points until the test gave up (docs/reliability.md, "A broker that stops answering"). So a broker missing from
   * the snapshot is forgotten (with none left, "no broker reachable" is for the connection state to
   * say), and `rx` that moved either way is an answer.
   */
  observe(samples: readonly BrokerStatsSample[], now: number): void {
    this.lastAnswer ??= now;
    const present = new Set<string>();
    for (const b of samples) {
      if (b.nodeid < 0) continue;
      present.add(b.name);
      const seen = this.brokers.get(b.name);
      const waiting = b.state === 'UP' ? b.waitresp_cnt : 0;
      const answered = seen !== undefined && b.rx !== seen.rx;
      if (answered) this.lastAnswer = now;
      let silentSince: number | null = null;
      if (waiting > 0) silentSince = answered || seen?.silentSince == null ? now : seen.silentSince;
      this.brokers.set(b.name, { nodeid: b.nodeid, rx: b.rx, silentSince, waiting });
    }
    for (const name of this.brokers.keys()) if (!present.has(name)) this.brokers.delete(name);
  }

  /** Every broker seen, with how long it has left requests unanswered (0 while it answers). */
  brokersSilence(now: number): SilentBroker[] {
    const out: SilentBroker[] = [];
    for (const [name, seen] of this.brokers) {
      out.push({ name, nodeid: seen.nodeid, silentMs: seen.silentSince === null ? 0 : now - seen.silentSince, waiting: seen.waiting });
    }
    return out.sort((a, b) => b.silentMs - a.silentMs);
  }

  /**
   * The broker that stalls the producer: silent for graceMs while no broker answered anything and, when
   * the leaders of the topic's partitions are known (node ids), while every one of them is silent too.
   */
  stalled(now: number, graceMs: number, leaders: readonly number[] | null = null): SilentBroker | null {
    if (this.lastAnswer === null || now - this.lastAnswer < graceMs) return null;
    const brokers = this.brokersSilence(now);
    const longest = brokers[0];
    if (longest === undefined || longest.silentMs < graceMs) return null;
    const silentLong = new Set(brokers.filter((b) => b.silentMs >= graceMs).map((b) => b.nodeid));
    if (leaders !== null && leaders.some((id) => !silentLong.has(id))) return null;
    return longest;
  }
}
