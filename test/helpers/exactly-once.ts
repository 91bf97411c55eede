// DELIVERY=exactly-once in the fault tests: a points topic with its compacted positions topic, the
// service's settings for it, and the topic read twice, as a read_committed consumer sees it and as a
// read_uncommitted one does (the copies of aborted transactions: proof that a fault hit one open).
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import { BROKERS, consumeAll, createTopic, uniqueTopic } from '../../support/kafka.js';
import { ACCOUNTING_HEADER, accountingRow, expectEveryAcceptedPointOnce, type AccountedLoad, type Accounting } from './accounting.js';

const KAFKA_SH = fileURLToPath(new URL('../../scripts/kafka.sh', import.meta.url));

export interface EosTopics {
  MQ_TOPIC: string;
  MQ_POSITIONS_TOPIC: string;
}

/** A fresh points topic (6 partitions) and its positions topic (1, compacted), on the single broker or, with `cluster`, the 3-broker one (RF 3, min ISR 2). */
export async function eosTopics(name: string, cluster?: string): Promise<EosTopics> {
  const topic =
    cluster === undefined
      ? await createTopic(uniqueTopic(name))
      : await createTopic(uniqueTopic(name), 6, 3, { brokers: cluster, config: { 'min.insync.replicas': '2' } });
  execFileSync(KAFKA_SH, ['topic', `${topic}.positions`, '1', 'cleanup.policy=compact', ...(cluster === undefined ? [] : ['--cluster'])], { stdio: 'ignore' });
  return { MQ_TOPIC: topic, MQ_POSITIONS_TOPIC: `${topic}.positions` };
}

/** The service's environment for exactly once on these topics, with an INSTANCE_ID of their own. */
export const exactlyOnceEnv = (t: EosTopics, more: Record<string, string> = {}): Record<string, string> => ({
  ...t,
  DELIVERY: 'exactly-once',
  INSTANCE_ID: `test-${t.MQ_TOPIC.slice(-8)}`,
  ...more,
});

export interface Readings {
  committed: Accounting;
  uncommitted: Accounting;
}

/** The topic read to its end both ways, at once; call it once the service's journals are empty (untilJournalEmpty). */
export async function readBoth(topic: string, load: AccountedLoad, brokers = BROKERS): Promise<Readings> {
  const opts = { expected: load.accepted, brokers, timeoutMs: 90_000, toEnd: true, giveUpIdleMs: 20_000 };
  const [committed, uncommitted] = await Promise.all([
    consumeAll(topic, { ...opts, isolation: 'read_committed' }),
    consumeAll(topic, { ...opts, isolation: 'read_uncommitted' }),
  ]);
  return { committed: load.account(committed), uncommitted: load.account(uncommitted) };
}

export function reportBoth(scenario: string, r: Readings, extra = ''): void {
  console.log(
    `${ACCOUNTING_HEADER}\n${accountingRow(`${scenario}: read_committed`, r.committed)}\n${accountingRow(`${scenario}: read_uncommitted`, r.uncommitted)}${extra === '' ? '' : `\n(${extra})`}`,
  );
}

/** Every 202 once for read_committed, nothing answered with an error delivered, and the fault hit open transactions. */
export function expectExactlyOnce(r: Readings, minAccepted: number): void {
  expectEveryAcceptedPointOnce(r.committed, minAccepted);
  expect(r.committed.deliveredAfterError).toBe(0);
  expect(r.uncommitted.lost).toBe(0);
  expect(r.uncommitted.duplicated).toBeGreaterThan(0);
}
