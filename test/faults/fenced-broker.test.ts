// A KRaft broker fenced by its controller still answers, and its metadata answers list no broker (it
// leaves itself out). librdkafka 2.12 took such an answer to mean that every broker it knew was gone,
// the bootstrap broker included, and the worker never connected again: points it had answered 202
// were not delivered (librdkafka #5301; patches/librdkafka-keep-brokers-on-empty-metadata.patch;
// without it, this test lost 10 and 8,980 points in two runs, both workers in the state then called
// `broker_down`, now `broker_unavailable`). A thawed single broker is fenced for a few ms, so the
// freeze test met that answer about once in 30-50 runs; `kafka.sh start --fencing` is a broker that
// its controller fences for about 6 s of every 8, and each worker asks for the topic's metadata every
// second (broker-link.ts), so every run here meets it many times.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACCOUNTING_HEADER, AccountedLoad, accountingRow, expectEveryAcceptedPointOnce } from '../helpers/accounting.js';
import { consumeAll, uniqueTopic } from '../../support/kafka.js';
import { point, postFresh, producerStateLines, startService, untilJournalEmpty, type Answer } from '../helpers/service.js';

const KAFKA_SH = fileURLToPath(new URL('../../scripts/kafka.sh', import.meta.url));
const BROKER_LOG = `${process.env.KAFKA_RUN ?? fileURLToPath(new URL('../../.run/kafka', import.meta.url))}/fencing/broker.log`;
const FENCING = '127.0.0.1:9192';
const kafka = (...args: string[]) =>
  execFileSync(KAFKA_SH, args, { stdio: ['ignore', 'pipe', 'inherit'] })
    .toString()
    .trim();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** How long the load runs: three to four fences of about 6 s each. */
const LOAD_MS = 25_000;

let started = false;
beforeAll(() => {
  started = !kafka('status').includes('fencing');
  console.log(kafka('start', '--fencing'));
}, 180_000);
afterAll(() => {
  if (started) kafka('stop', '--fencing');
}, 120_000);

/** The controller's "Fencing broker" lines in the broker's log, from byte `from` on. */
function fencesSince(from: number): number {
  return readFileSync(BROKER_LOG)
    .subarray(from)
    .toString()
    .split('\n')
    .filter((l) => l.includes('Fencing broker 1 ')).length;
}

/**
 * A topic on the fencing broker. It can only be created, and described, while the broker is unfenced
 * (about 2 s of every 8): Kafka's own tool, which kafka.sh retries every second, is refused or times
 * out at once while it is fenced, where librdkafka's admin client waits for a controller until its
 * timeout. `kafka.sh topic` creates only a missing topic, so a failed describe is simply run again.
 */
function fencingTopic(): string {
  const topic = uniqueTopic('fenced');
  for (let attempt = 1; ; attempt++) {
    try {
      kafka('topic', topic, '6', '--fencing');
      return topic;
    } catch (err) {
      if (attempt === 4) throw err;
    }
  }
}

describe('a broker its controller keeps fencing (metadata answers that list no broker)', () => {
  it(
    'the workers keep their broker: every point answered 202 reaches Kafka once, and every worker still takes points after the fences',
    { timeout: 240_000 },
    async () => {
      const topic = fencingTopic();
      const svc = await startService({ MQ_BROKERS: FENCING, MQ_TOPIC: topic, WORKERS: '2' }, { timeoutMs: 60_000 });
      const load = new AccountedLoad(svc.url, { connections: 4, pointsPerRequest: 10, pauseMs: 20 });
      const logFrom = readFileSync(BROKER_LOG).length;
      let fences: number;
      let answers: Answer[];
      let takingMs: number;
      try {
        load.start();
        await sleep(LOAD_MS);
        fences = fencesSince(logFrom);
        // Every worker takes points: a round of 20 requests on fresh connections (the kernel spreads
        // them over both workers) all answered 202, within one fencing cycle and a half.
        const from = Date.now();
        for (let round = 0; ; round++) {
          answers = await Promise.all(Array.from({ length: 20 }, (_, i) => postFresh(svc.url, [point(`after-${load.runId}-${round}-${i}`)])));
          takingMs = Date.now() - from;
          if (answers.every((r) => r.status === 202) || takingMs > 12_000) break;
          await sleep(200);
        }
      } finally {
        await load.stop();
      }
      await untilJournalEmpty(svc, 'the journals to be produced whole');
      const messages = await consumeAll(topic, { expected: load.accepted, brokers: FENCING, timeoutMs: 90_000, toEnd: true });
      const a = load.account(messages);
      console.log(
        `${ACCOUNTING_HEADER}\n${accountingRow(`broker fenced by its controller ${fences} times during ${LOAD_MS / 1000} s of load`, a)}\n(20 fresh requests: ${answers.filter((r) => r.status === 202).length} answered 202 ${takingMs} ms after the load)`,
      );
      console.log(producerStateLines(svc.output));
      // The scenario happened: the broker was fenced, several times, while the workers were polling it.
      expect(fences).toBeGreaterThanOrEqual(2);
      expect(
        answers.filter((r) => r.status !== 202),
        producerStateLines(svc.output),
      ).toEqual([]);
      expectEveryAcceptedPointOnce(a, 1_000);
      expect(
        svc.output.filter((l) => l.includes('"to":"broker_unavailable"')),
        'a worker lost its brokers',
      ).toEqual([]);
      expect(await svc.stop()).toBe(0);
    },
  );
});
