// The spec's design load, 10,000 points per second, in its two shapes, each paced by bench/lib/paced-load.ts:
// bench/run.ts measures the service under both, bench/floor.ts the tail this machine gives a bare
// server under the second.
export const DESIGN_LOAD = {
  '100×100': { points: 100, connections: 10, rate: 100 },
  '10000×1': { points: 1, connections: 50, rate: 10_000 },
} as const;
