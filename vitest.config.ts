import { defineConfig } from 'vitest/config';

const shared = {
  setupFiles: ['test/setup.ts'],
  pool: 'forks' as const,
  testTimeout: 60_000,
  hookTimeout: 120_000,
};

// The files that freeze, stop or kill a broker (or fill a journal while theirs is frozen): nothing else
// may use that broker meanwhile.
const BROKER_FAULTS = ['test/faults/**/*.test.ts', 'test/integration/operability.test.ts', 'test/integration/journal.test.ts'];

export default defineConfig({
  test: {
    reporters: ['default'],
    projects: [
      // The unit tests, and the service's tests that leave their broker alone (each on topics of its
      // own): two files at a time, first.
      { test: { ...shared, name: 'shared-broker', include: ['test/**/*.test.ts'], exclude: BROKER_FAULTS, maxWorkers: 2, sequence: { groupOrder: 0 } } },
      // Then the broker's faults, one file at a time.
      { test: { ...shared, name: 'broker-faults', include: BROKER_FAULTS, maxWorkers: 1, fileParallelism: false, sequence: { groupOrder: 1 } } },
    ],
  },
});
