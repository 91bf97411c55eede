// Issue 3: tests that break things for real, on the 3-broker cluster of scripts/kafka.sh (RF 3,
// min.insync.replicas=2) under a steady load, with an account of every point that got 202.
// Each test prints its accounting as a row of the README's reliability table (also appended to
// .run/reliability.md). `make test-faults` runs this file alone; `make test` includes it.
import { execFile, execFileSync } from 'node:child_process';
import { Agent, request } from 'node:http';
import { promisify } from 'node:util';
import { appendFileSync, mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACCOUNTING_HEADER, AccountedLoad, accountingRow, expectEveryAcceptedPointOnce, type Accounting } from '../helpers/accounting.js';
import { consumeAll, createTopic, leaderOf, uniqueTopic } from '../../support/kafka.js';
import { cpuTicks, workerPids } from '../helpers/processes.js';
import {
  metric,
  metricValue,
  point,
  postFresh,
  producerStateChanges,
  producerStateLines,
  startService,
  until,
  untilJournalEmpty,
  type Answer,
  type Service,
} from '../helpers/service.js';
import { eosTopics, exactlyOnceEnv, readBoth, reportBoth, type EosTopics, type Readings } from '../helpers/exactly-once.js';
import { transactionalId } from '../../src/config.js';

const KAFKA_SH = fileURLToPath(new URL('../../scripts/kafka.sh', import.meta.url));
const BLOCK_EVENT_LOOP = fileURLToPath(new URL('../fixtures/block-event-loop.mjs', import.meta.url));
const CLUSTER = '127.0.0.1:19092,127.0.0.1:19192,127.0.0.1:19292';
const RESULTS = fileURLToPath(new URL('../../.run/reliability.md', import.meta.url));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
// Points a request of the loads under broker faults: the cluster replicates each message three times,
// and at the accounted load's 20 its brokers took a third of make test's CPU. Every fault still meets
// a load; the worker kills below, which find what the journal's replay leaves behind, keep 20.
const POINTS_UNDER_BROKER_FAULTS = 5;
// The loads under broker faults pause 10 ms between a connection's requests (the accounted load's
// default is 5): a broker fault holds up what is in flight whatever the rate, and the other lane of
// make test gets the CPU. Still thousands of points a second meet each fault.
const BROKER_FAULT_LOAD = { pointsPerRequest: POINTS_UNDER_BROKER_FAULTS, pauseMs: 10 };
// How long a load runs before its fault (both workers busy, points in flight), and on after the fault
// is over (the service taking points again under load).
const LOAD_BEFORE_FAULT_MS = 2_000;
const LOAD_AFTER_FAULT_MS = 3_000;
// How long the brokers stay away. No broker answers for the outage and the cluster's restart after it
// (about 10 s more), twice BROKER_DOWN_GRACE_MS (5 s) and more, so that the workers refuse for most of
// it. The freeze outlasts the controller's fencing (broker.session.timeout.ms, 4 s) and the request
// timeout the freeze test gives librdkafka (its default is 30 s), so that the requests held by the
// frozen broker time out while it is frozen.
const OUTAGE_MS = 10_000;
const FREEZE_REQUEST_TIMEOUT_MS = 8_000;
const FREEZE_MS = 15_000;
// After the cluster's restart, how long the workers have to take points again before fresh connections ask.
const AFTER_OUTAGE_MS = 5_000;
// How long the refused-requests topic's only broker is away: refusals queue meanwhile, and are
// written once it is back.
const REFUSED_BROKER_AWAY_MS = 6_000;
const kafka = (...args: string[]) =>
  execFileSync(KAFKA_SH, args, { stdio: ['ignore', 'pipe', 'inherit'] })
    .toString()
    .trim();
/** The same, without blocking this process: the load generator runs in it and must keep sending. */
const kafkaAsync = async (...args: string[]) => (await promisify(execFile)(KAFKA_SH, args)).stdout.trim();

let startedCluster = false;
beforeAll(() => {
  startedCluster = !kafka('status').includes('node1');
  console.log(kafka('start', '--cluster'));
}, 180_000);
afterAll(() => {
  if (startedCluster) kafka('stop', '--cluster');
}, 120_000);

async function clusterTopic(name: string): Promise<string> {
  return createTopic(uniqueTopic(name), 6, 3, { brokers: CLUSTER, config: { 'min.insync.replicas': '2' } });
}

function record(scenario: string, a: Accounting, extra = ''): void {
  const row = accountingRow(scenario, a);
  console.log(`${ACCOUNTING_HEADER}\n${row}${extra ? `\n${extra}` : ''}`);
  mkdirSync(fileURLToPath(new URL('../../.run', import.meta.url)), { recursive: true });
  appendFileSync(RESULTS, `${new Date().toISOString()} ${row}${extra ? ` ${extra}` : ''}\n`);
}

/**
 * Once the service has produced all it holds (its journals empty; null: it has exited), the topic read
 * to its end and accounted for.
 */
async function readBack(topic: string, load: AccountedLoad, svc: Service | null): Promise<Accounting> {
  if (svc !== null) await untilJournalEmpty(svc, 'the journals to be produced whole');
  return load.account(await consumeAll(topic, { expected: load.accepted, brokers: CLUSTER, timeoutMs: 90_000, toEnd: true }));
}

/** GET /readyz on a fresh connection (the kernel picks the worker anew); its status. */
async function readyzFresh(url: string): Promise<number> {
  return new Promise((resolve) => {
    const req = request(`${url}/readyz`, { agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', () => resolve(0));
    req.end();
  });
}

/** For each worker, how long after `since` its producer last went back to accepting points (its log). */
function acceptingAgainMs(output: readonly string[], since: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const { worker, time } of producerStateChanges(output, 'accepting')) if (time >= since - 30_000) out[worker] = time - since;
  return out;
}

/** Invalid requests (a latitude of 95) on 4 connections as fast as they are answered, their statuses counted. */
class BadRequests {
  readonly statuses: Record<string, number> = {};
  sent = 0;
  private running = false;
  private loops: Promise<void>[] = [];
  private readonly agent = new Agent({ keepAlive: true, maxSockets: 4 });
  private readonly body = JSON.stringify([point('MSKU-bad', { lat: 95 })]);

  constructor(private readonly url: string) {}

  start(): void {
    this.running = true;
    for (let c = 0; c < 4; c++) this.loops.push(this.loop());
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
    this.agent.destroy();
  }

  private async loop(): Promise<void> {
    while (this.running) {
      this.sent++;
      const status = await new Promise<number>((resolve) => {
        const req = request(`${this.url}/track`, { method: 'POST', agent: this.agent, headers: { 'content-type': 'application/json' } }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        });
        req.on('error', () => resolve(0));
        req.end(this.body);
      });
      this.statuses[status] = (this.statuses[status] ?? 0) + 1;
      await sleep(2);
    }
  }
}

describe('on a 3-broker cluster under load', () => {
  it('kill -9 of the leader of a busy partition: nothing lost, nothing duplicated, order kept', { timeout: 240_000 }, async () => {
    const topic = await clusterTopic('kill-leader');
    const svc = await startService({ MQ_BROKERS: CLUSTER, MQ_TOPIC: topic, WORKERS: '2' });
    const load = new AccountedLoad(svc.url, BROKER_FAULT_LOAD);
    let leader: number;
    try {
      load.start();
      await sleep(LOAD_BEFORE_FAULT_MS);
      leader = await leaderOf(topic, 0, CLUSTER);
      expect(leader).toBeGreaterThan(0);
      await kafkaAsync('kill-node', String(leader));
      await sleep(8_000);
      await kafkaAsync('start-node', String(leader));
      await sleep(LOAD_AFTER_FAULT_MS);
    } finally {
      await load.stop();
    }
    const restarts = (await metric(svc.url, 'ingest_worker_restarts_total')) ?? 0;
    const a = await readBack(topic, load, svc);
    // Why a request got 500, if one did: the producer queue at its limit (counted here) or a state change (printed below).
    const queueFull = (await metric(svc.url, 'ingest_requests_rejected_total{reason="queue_full"}')) ?? 0;
    record(
      `kill -9 the leader of partition 0 (node ${leader}) for 8 s, then restart it`,
      a,
      `(worker restarts ${restarts}; requests refused as queue_full ${queueFull}; connection errors ${JSON.stringify(load.errorCodes)})`,
    );
    if (restarts > 0) console.log(svc.output.filter((l) => /"level":[56]0/.test(l)).join('\n'));
    console.log(producerStateLines(svc.output));
    expectEveryAcceptedPointOnce(a, 10_000);
    expect(restarts).toBe(0);
    expect(await svc.stop()).toBe(0);
  });

  it(
    `all three brokers killed for ${OUTAGE_MS / 1000} s: every 202 reaches Kafka, no hang, no worker lost, every worker serves again`,
    { timeout: 300_000 },
    async () => {
      const topic = await clusterTopic('outage');
      const svc = await startService({ MQ_BROKERS: CLUSTER, MQ_TOPIC: topic, WORKERS: '2' });
      // The service is ready once one worker is; the other may still be starting.
      await until('both workers running', async () => workerPids(svc).length === 2);
      const pidsBefore = workerPids(svc);
      const load = new AccountedLoad(svc.url, BROKER_FAULT_LOAD);
      let outageMs: number;
      let afterwards: Answer[];
      let restartedAt: number;
      try {
        load.start();
        await sleep(LOAD_BEFORE_FAULT_MS);
        const t0 = Date.now();
        // kill -9, all three at once: what was in flight stays in the producers' queues.
        await Promise.all(['1', '2', '3'].map((n) => kafkaAsync('kill-node', n)));
        await sleep(OUTAGE_MS);
        await kafkaAsync('start', '--cluster');
        restartedAt = Date.now();
        outageMs = restartedAt - t0;
        await sleep(AFTER_OUTAGE_MS);
        // Fresh connections land on either worker: both must take points again.
        afterwards = await Promise.all(Array.from({ length: 20 }, (_, i) => postFresh(svc.url, [point(`after-${load.runId}-${i}`)])));
      } finally {
        await load.stop();
      }
      const restarts = (await metric(svc.url, 'ingest_worker_restarts_total')) ?? 0;
      const a = await readBack(topic, load, svc);
      record(
        `kill -9 of all 3 brokers, restarted after ${OUTAGE_MS / 1000} s (no broker answering for ${(outageMs / 1000).toFixed(0)} s)`,
        a,
        `(worker restarts ${restarts}; 20 requests on fresh connections ${AFTER_OUTAGE_MS / 1000} s after the restart: ${afterwards.filter((r) => r.status === 202).length}×202)`,
      );
      console.log(producerStateLines(svc.output));
      console.log(
        `taking points again, ms after kafka.sh start --cluster returned (negative: before), by worker: ${JSON.stringify(acceptingAgainMs(svc.output, restartedAt))}`,
      );
      expect(a.lost).toBe(0);
      expect(a.hangs).toBe(0);
      expect(a.connectionErrors).toBe(0);
      expect(a.statuses['500']).toBeGreaterThan(0);
      // Refused during the outage once the grace period was over, not only once the queue was full.
      expect(await metric(svc.url, 'ingest_requests_rejected_total{reason="broker_unavailable"}')).toBeGreaterThan(0);
      expect(afterwards.filter((r) => r.status !== 202)).toEqual([]);
      expect(restarts).toBe(0);
      expect(workerPids(svc).sort()).toEqual(pidsBefore.sort());
      expect(await svc.stop()).toBe(0);
    },
  );

  it(
    `one broker of three frozen (SIGSTOP) for ${FREEZE_MS / 1000} s under load: nothing lost or duplicated; what the service reports, second by second`,
    { timeout: 300_000 },
    async () => {
      const topic = await clusterTopic('freeze-one');
      const svc = await startService({
        MQ_BROKERS: CLUSTER,
        MQ_TOPIC: topic,
        WORKERS: '2',
        MQ_OPT_REQUEST_TIMEOUT_MS: String(FREEZE_REQUEST_TIMEOUT_MS),
      });
      const load = new AccountedLoad(svc.url, BROKER_FAULT_LOAD);
      let victim = -1;
      let controller: string;
      const timeline: string[] = [];
      let readyAfterThawMs: number;
      try {
        load.start();
        await sleep(LOAD_BEFORE_FAULT_MS);
        victim = await leaderOf(topic, 0, CLUSTER);
        // Recorded because runs differed (the frozen node fenced within seconds in most, not for the whole
        // freeze in two) and whether the frozen node was also the active KRaft controller was not known.
        controller = await kafkaAsync('controller', '--cluster');
        const frozenAt = Date.now();
        await kafkaAsync('freeze-node', String(victim));
        // Every second: readiness as two fresh connections see it, and the producers' view.
        while (Date.now() - frozenAt < FREEZE_MS) {
          const text = await (await fetch(`${svc.url}/metrics`)).text();
          const ready = await Promise.all([readyzFresh(svc.url), readyzFresh(svc.url)]);
          const silent = [1, 2, 3].map((n) => metricValue(text, `ingest_kafka_broker_silent_seconds{broker="${n}"}`) ?? 0);
          timeline.push(
            `+${Math.round((Date.now() - frozenAt) / 1000)}s readyz ${ready.join('/')} stalled ${metricValue(text, 'ingest_kafka_stalled')} queue ${metricValue(text, 'ingest_producer_queue_points')} silent s ${silent.map((x) => x.toFixed(0)).join('/')} 202s ${load.statusCount(202)} 500s ${load.statusCount(500)}`,
          );
          await sleep(1_000);
        }
        const thawedAt = Date.now();
        await kafkaAsync('thaw-node', String(victim));
        await until(
          'every worker ready after the thaw',
          async () => (await Promise.all([1, 2, 3, 4].map(() => readyzFresh(svc.url)))).every((r) => r === 200),
          30_000,
        );
        readyAfterThawMs = Date.now() - thawedAt;
        await sleep(LOAD_AFTER_FAULT_MS);
      } finally {
        if (victim > 0) await kafkaAsync('thaw-node', String(victim)).catch(() => undefined);
        await load.stop();
      }
      console.log(timeline.join('\n'));
      const a = await readBack(topic, load, svc);
      record(
        `node ${victim} (leader of partition 0) frozen with SIGSTOP for ${FREEZE_MS / 1000} s (request timeout ${FREEZE_REQUEST_TIMEOUT_MS / 1000} s), then thawed`,
        a,
        `(active KRaft controller at the freeze: node ${controller}; all workers ready ${readyAfterThawMs} ms after the thaw)`,
      );
      expectEveryAcceptedPointOnce(a, 10_000);
      expect(readyAfterThawMs).toBeLessThan(5_000);
      expect(await svc.stop()).toBe(0);
    },
  );

  it(
    "the refused-requests topic's only broker killed under load and a flood of bad requests: every valid request 202 and in Kafka once; the refusals answered alike, and kept once it is back",
    { timeout: 240_000 },
    async () => {
      // The points on nodes 2 and 3 only, the refused topic on node 1 only: killing node 1 takes the
      // refused topic's partition away and leaves every partition of the points led and in sync.
      const topic = uniqueTopic('refused-away-points');
      const refused = uniqueTopic('refused-away');
      await kafkaAsync('topic-placed', topic, '2:3,3:2,2:3,3:2,2:3,3:2', '--cluster');
      await kafkaAsync('topic-placed', refused, '1', '--cluster');
      const svc = await startService({ MQ_BROKERS: CLUSTER, MQ_TOPIC: topic, WORKERS: '2', MQ_REFUSED_TOPIC: refused, MQ_REFUSED_RATE: '1000' });
      const load = new AccountedLoad(svc.url, BROKER_FAULT_LOAD);
      const flood = new BadRequests(svc.url);
      const written = async () => (await metric(svc.url, 'ingest_refused_requests_written_total')) ?? 0;
      let before = 0;
      try {
        load.start();
        flood.start();
        await sleep(LOAD_BEFORE_FAULT_MS);
        before = await written();
        await kafkaAsync('kill-node', '1');
        await sleep(REFUSED_BROKER_AWAY_MS);
        await kafkaAsync('start-node', '1');
        await sleep(LOAD_AFTER_FAULT_MS);
      } finally {
        await Promise.all([load.stop(), flood.stop()]);
      }
      await until('the refusals queued during the outage to be written', async () => (await written()) > before + 100, 30_000);
      const after = await written();
      const dropped = ['over_rate', 'unavailable', 'queue_full', 'failed'].map(
        async (reason) => `${reason} ${(await metric(svc.url, `ingest_refused_requests_dropped_total{reason="${reason}"}`)) ?? 0}`,
      );
      const a = await readBack(topic, load, svc);
      record(
        `kill -9 node 1, the only broker of MQ_REFUSED_TOPIC, for ${REFUSED_BROKER_AWAY_MS / 1000} s under load and ${flood.sent} bad requests`,
        a,
        `(bad requests answered ${JSON.stringify(flood.statuses)}; refused requests written ${before} before the kill, ${after} in all; dropped: ${(await Promise.all(dropped)).join(', ')})`,
      );
      expect(a.lost).toBe(0);
      expect(a.duplicated).toBe(0);
      expect(a.hangs).toBe(0);
      expect(a.statuses).toEqual({ 202: a.requests });
      expect(Object.keys(flood.statuses)).toEqual(['400']);
      expect(before).toBeGreaterThan(0);
      expect(await svc.stop()).toBe(0);
    },
  );

  it('DELIVERY=exactly-once: kill -9 of the leader of a busy partition mid-transaction: every 202 once for read_committed', { timeout: 240_000 }, async () => {
    await exactlyOnceUnderBrokerKill('eos-kill-leader', 'the leader of partition 0', (t) => leaderOf(t.MQ_TOPIC, 0, CLUSTER));
  });

  it("DELIVERY=exactly-once: kill -9 of the broker coordinating slot 0's transactions: every 202 once for read_committed", { timeout: 240_000 }, async () => {
    // Kafka's rule (TransactionStateManager.partitionFor): the id's Java hashCode, modulo the partitions of __transaction_state (50).
    await exactlyOnceUnderBrokerKill('eos-kill-coordinator', 'the transaction coordinator of slot 0', (_t, env) => {
      const id = transactionalId({ instance: env.INSTANCE_ID!, positionsTopic: '', commitIntervalMs: 0, maxPoints: 0, transactionTimeoutMs: 0 }, 0);
      return leaderOf('__transaction_state', javaHashAbs(id) % 50, CLUSTER);
    });
  });

  it(
    "DELIVERY=exactly-once: a transaction failed while its worker's event loop was blocked (every broker frozen past the message timeout): aborted and produced again, not stalled; every 202 once",
    { timeout: 240_000 },
    async () => {
      // The brokers frozen, then the workers' JavaScript blocked (test/fixtures/block-event-loop.mjs)
      // while their transactions are open: librdkafka's threads run on, the open transactions' messages
      // time out, and librdkafka puts each transaction in its abortable state. Unblocked, a worker takes
      // the requests that waited on its sockets before its timers: librdkafka refuses their messages
      // (ERR__STATE) until the transaction is aborted. A transaction that waited for librdkafka to take
      // them before committing waited for ever, and its journal was never committed (most likely what
      // CI on Node 24 met in exactly-once.test.ts's frozen worker: the same race).
      const t = await eosTopics('eos-blocked-loop', CLUSTER);
      const env = exactlyOnceEnv(t, {
        MQ_BROKERS: CLUSTER,
        WORKERS: '2',
        TRANSACTION_TIMEOUT_MS: '4000',
        TRANSACTION_COMMIT_INTERVAL_MS: '3000',
        BLOCK_EVENT_LOOP_MS: '7000',
      });
      const svc = await startService(env, { nodeArgs: ['--import', BLOCK_EVENT_LOOP] });
      // The accounted load's own pace: the blocked loops take no request for 7 s of its 10, and the
      // points it accepts must still be well over the 10,000 the accounting asks for.
      const load = new AccountedLoad(svc.url, { connections: 8, pointsPerRequest: 10, requestTimeoutMs: 60_000 });
      const nodes = ['1', '2', '3'];
      let frozen = false;
      try {
        load.start();
        await sleep(LOAD_BEFORE_FAULT_MS);
        frozen = true;
        for (const node of nodes) await kafkaAsync('freeze-node', node);
        await sleep(300); // messages the brokers will not answer in librdkafka's queue
        for (const pid of workerPids(svc)) process.kill(pid, 'SIGUSR2');
        await sleep(5_000);
        for (const node of nodes) await kafkaAsync('thaw-node', node);
        frozen = false;
        await sleep(LOAD_AFTER_FAULT_MS);
      } finally {
        if (frozen) for (const node of nodes) await kafkaAsync('thaw-node', node).catch(() => undefined);
        await load.stop();
      }
      await untilJournalEmpty(svc, 'the journals to be committed whole');
      const r = await readBoth(t.MQ_TOPIC, load, CLUSTER);
      const refusedInTransaction = svc.output.filter((l) =>
        l.includes('the transaction failed (a message of it timed out or was refused) and must be aborted'),
      ).length;
      reportBoth(
        "DELIVERY=exactly-once, the brokers frozen 5.3 s and the workers' event loops blocked 7 s (transaction timeout 4 s)",
        r,
        `${await transactionsLine(svc.url)}; transactions aborted after librdkafka refused their messages: ${refusedInTransaction}`,
      );
      // The outcome is the assertion: the journals committed whole (the stall left them full), each
      // 202 once. What the fault did is reported: the aborted count of a worker the broker fenced (its
      // transaction outlived the timeout) goes with it, and read_uncommitted shows aborted copies only
      // of what the brokers wrote before they froze.
      expectEveryTransactionalPointOnce(r);
      expect(await svc.stop()).toBe(0);
    },
  );

  it('SIGTERM under load: every 202 reaches Kafka, exit 0', { timeout: 180_000 }, async () => {
    const topic = await clusterTopic('sigterm');
    const svc = await startService({ MQ_BROKERS: CLUSTER, MQ_TOPIC: topic, WORKERS: '2' });
    const load = new AccountedLoad(svc.url);
    load.start();
    await sleep(4_000);
    const code = await svc.stop('SIGTERM');
    await sleep(1_000);
    await load.stop();
    const a = await readBack(topic, load, null);
    record('SIGTERM to the service under load', a);
    expect(code).toBe(0);
    expect(a.accepted).toBeGreaterThan(5_000);
    expect(a.lost).toBe(0);
    expect(a.hangs).toBe(0);
  });

  for (const mode of ['delivered', 'async'] as const) {
    it(`kill -9 of a worker under load, ACK_MODE=${mode}: replaced within a second; no accepted point lost`, { timeout: 180_000 }, async () => {
      const topic = await clusterTopic(`kill-worker-${mode}`);
      const svc = await startService({ MQ_BROKERS: CLUSTER, MQ_TOPIC: topic, WORKERS: '2', ACK_MODE: mode });
      const load = new AccountedLoad(svc.url, { connections: 16 });
      let replacedMs: number;
      let steps: string;
      let victim = 0;
      try {
        load.start();
        await sleep(LOAD_BEFORE_FAULT_MS);
        const before = workerPids(svc);
        // The busier worker (more CPU time so far): the kernel may have given it most connections.
        victim = before.sort((a, b) => cpuTicks(b) - cpuTicks(a))[0]!;
        // The look-up above blocked this process, and with it the load: a worker left without requests
        // for those milliseconds has its journal acknowledged whole, and the kill finds nothing to
        // produce again. Killed a second later, under load again.
        await sleep(1_000);
        const killedAt = Date.now();
        process.kill(victim, 'SIGKILL');
        // Replaced = a new worker process is listening (its producer connected, it told the primary).
        await until(
          'a replacement worker',
          async () => {
            const now = workerPids(svc);
            return now.length === 2 && !now.includes(victim);
          },
          10_000,
        );
        const newPid = workerPids(svc).find((p) => !before.includes(p))!;
        await until(
          'the replacement to connect to Kafka',
          async () => svc.output.some((l) => l.includes(`"pid":${newPid}`) && l.includes('kafka producer connected')),
          10_000,
        );
        const timeOf = (pred: (l: string) => boolean) => (JSON.parse(svc.output.find(pred)!) as { time: number }).time - killedAt;
        replacedMs = timeOf((l) => l.includes(`"pid":${newPid}`) && l.includes('kafka producer connected'));
        steps = `primary saw the exit +${timeOf((l) => l.includes('worker exited unexpectedly'))} ms, replacement's first log line +${timeOf((l) => l.includes(`"pid":${newPid}`))} ms, its producer connected +${replacedMs} ms`;
        await sleep(LOAD_AFTER_FAULT_MS);
      } finally {
        await load.stop();
      }
      const a = await readBack(topic, load, svc);
      const replayed = (await metric(svc.url, 'ingest_journal_replayed_points_total{cause="restart"}')) ?? 0;
      record(`kill -9 one of 2 workers, ACK_MODE=${mode}`, a, `(after the kill: ${steps}; produced again from the journal: ${replayed})`);
      expect(replacedMs).toBeGreaterThan(0);
      expect(replacedMs).toBeLessThan(1_000);
      expect(a.hangs).toBe(0);
      // Nothing answered 202 is lost: delivered, Kafka had it; async, the replacement produced the
      // dead worker's journal again. Duplicates are async's price of a crash (at least once), delivered has none.
      expect(a.lost).toBe(0);
      if (mode === 'delivered') expect(a.duplicated).toBe(0);
      // async: the kill met points Kafka had not acknowledged, which the replacement produced again.
      if (mode === 'async') expect(replayed).toBeGreaterThan(0);
      expect(await svc.stop()).toBe(0);
    });
  }
});

/**
 * DELIVERY=exactly-once, 2 workers under load on the cluster: the broker `pick` names killed after
 * LOAD_BEFORE_FAULT_MS for 8 s, then started again; every 202 once for a read_committed reader.
 */
async function exactlyOnceUnderBrokerKill(name: string, what: string, pick: (t: EosTopics, env: Record<string, string>) => Promise<number>): Promise<void> {
  const t = await eosTopics(name, CLUSTER);
  const env = exactlyOnceEnv(t, { MQ_BROKERS: CLUSTER, WORKERS: '2' });
  const svc = await startService(env);
  const load = new AccountedLoad(svc.url, BROKER_FAULT_LOAD);
  let node: number;
  try {
    load.start();
    await sleep(LOAD_BEFORE_FAULT_MS);
    node = await pick(t, env);
    expect(node).toBeGreaterThan(0);
    await kafkaAsync('kill-node', String(node));
    await sleep(8_000);
    await kafkaAsync('start-node', String(node));
    await sleep(LOAD_AFTER_FAULT_MS);
  } finally {
    await load.stop();
  }
  await untilJournalEmpty(svc, 'the journals to be committed whole');
  const r = await readBoth(t.MQ_TOPIC, load, CLUSTER);
  reportBoth(`DELIVERY=exactly-once, kill -9 ${what} (node ${node}) for 8 s`, r, await transactionsLine(svc.url));
  expectEveryTransactionalPointOnce(r);
  expect(await svc.stop()).toBe(0);
}

/** Java's String.hashCode, made non-negative as Kafka's Utils.abs does. */
function javaHashAbs(text: string): number {
  let h = 0;
  for (let i = 0; i < text.length; i++) h = (Math.imul(31, h) + text.charCodeAt(i)) | 0;
  return h === -2147483648 ? 0 : Math.abs(h);
}

async function transactionsLine(url: string): Promise<string> {
  const committed = (await metric(url, 'ingest_transactions_total{outcome="committed"}')) ?? 0;
  const aborted = (await metric(url, 'ingest_transactions_total{outcome="aborted"}')) ?? 0;
  const restarts = (await metric(url, 'ingest_worker_restarts_total')) ?? 0;
  return `transactions ${committed} committed, ${aborted} aborted; worker restarts ${restarts}`;
}

/**
 * A broker fault need not abort a transaction (librdkafka retries a produce or a commit with the same
 * sequence numbers against the new leader or coordinator): what a read_uncommitted reader finds more
 * is reported, not required.
 */
function expectEveryTransactionalPointOnce(r: Readings): void {
  expectEveryAcceptedPointOnce(r.committed, 10_000);
  expect(r.committed.deliveredAfterError).toBe(0);
  expect(r.uncommitted.lost).toBe(0);
}
