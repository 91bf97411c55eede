import { defineConfig } from 'vitest/config';

// Files of the shared-broker and unit projects run at once (scripts/test.sh --fast sets 2).
const sharedWorkers = Number(process.env.TEST_SHARED_WORKERS ?? 1);

const shared = {
  setupFiles: ['test/setup.ts'],
  pool: 'forks' as const,
  testTimeout: 60_000,
  hookTimeout: 120_000,
};

// The fault tests on brokers of their own: the 3-broker cluster's, and the fencing broker's.
const CLUSTER = ['test/faults/cluster-faults.test.ts'];
const FENCING = ['test/faults/fenced-broker.test.ts'];
// The files that freeze, stop or kill the local broker (or fill a journal while it is frozen): nothing
// else may use it meanwhile.
const BROKER_FAULTS = ['test/faults/**/*.test.ts', 'test/integration/operability.test.ts', 'test/integration/journal.test.ts'];
// Of those, the ones make test runs at the end of the cluster lane, on a second local broker of their
// own, so that the two lanes end together.
const SECOND_BROKER = [
  'test/faults/journal-faults.test.ts',
  'test/faults/journal-slots.test.ts',
  'test/faults/delivered-mode.test.ts',
  'test/faults/failing-disk.test.ts',
];
// The Schema Registry's tests start a registry (a JVM) of their own: make test runs them first in the
// second lane, on its broker before its faults, which had room for them where the main lane had none.
const REGISTRY = ['test/integration/schema-registry.test.ts'];
// The files whose timing a busy machine breaks: the gateway's Idempotency-Key waits 50 ms at most for
// Redis; the event-loop delay test measures its own loop's lateness in milliseconds.
const ALONE = ['test/integration/gateway.test.ts', 'test/unit/metrics/event-loop-delay.test.ts'];

// The unit tests: no broker. Their own project, so that a lane can take them beside its fault tests.
const UNIT = ['test/unit/**/*.test.ts'];

// scripts/test.sh's lanes: `cluster`, `fencing`, `unit` then `registry` and `second-broker` beside `shared-broker`
// then `broker-faults`, and `alone` after both. One vitest run of them all (npx vitest run) takes the
// groups in this order, one after the other. The orders start at 1: vitest runs a one-worker project
// of order 0 last.
export default defineConfig({
  test: {
    reporters: ['default'],
    projects: [
      // The service's tests that leave their broker alone, each on topics of its own. One file at a time
      // beside the cluster lane, where two made timing-sensitive tests flaky (bench/HISTORY.md); make
      // test-fast, which has no cluster lane, runs two (TEST_SHARED_WORKERS).
      {
        test: {
          ...shared,
          name: 'shared-broker',
          include: ['test/**/*.test.ts'],
          exclude: [...UNIT, ...BROKER_FAULTS, ...ALONE, ...REGISTRY],
          maxWorkers: sharedWorkers,
          fileParallelism: sharedWorkers > 1,
          sequence: { groupOrder: 1 },
        },
      },
      {
        test: {
          ...shared,
          name: 'broker-faults',
          include: BROKER_FAULTS,
          exclude: [...CLUSTER, ...FENCING, ...SECOND_BROKER],
          maxWorkers: 1,
          fileParallelism: false,
          sequence: { groupOrder: 2 },
        },
      },
      { test: { ...shared, name: 'cluster', include: CLUSTER, maxWorkers: 1, fileParallelism: false, sequence: { groupOrder: 3 } } },
      { test: { ...shared, name: 'fencing', include: FENCING, maxWorkers: 1, fileParallelism: false, sequence: { groupOrder: 4 } } },
      {
        test: {
          ...shared,
          name: 'unit',
          include: UNIT,
          exclude: ALONE,
          maxWorkers: sharedWorkers,
          fileParallelism: sharedWorkers > 1,
          sequence: { groupOrder: 5 },
        },
      },
      // Order 5, with the unit tests: before second-broker's faults in its lane, beside the unit tests in make test-fast's.
      { test: { ...shared, name: 'registry', include: REGISTRY, maxWorkers: 1, fileParallelism: false, sequence: { groupOrder: 5 } } },
      { test: { ...shared, name: 'second-broker', include: SECOND_BROKER, maxWorkers: 1, fileParallelism: false, sequence: { groupOrder: 6 } } },
      { test: { ...shared, name: 'alone', include: ALONE, maxWorkers: 1, fileParallelism: false, sequence: { groupOrder: 7 } } },
    ],
  },
});
