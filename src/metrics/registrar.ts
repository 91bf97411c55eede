// What every group of worker metrics (metrics.ts, kafka-metrics.ts) registers with.
import type client from 'prom-client';

export const METRIC_PREFIX = 'ingest_';

/** What every group of worker metrics registers with: the worker's registry, and running totals turned into increments. */
export interface Registrar {
  registers: client.Registry[];
  delta: (key: string, total: number) => number;
}

/** Turns a running total into the increments a prom-client counter wants. */
export function deltas() {
  const reported = new Map<string, number>();
  return (key: string, total: number) => {
    const d = total - (reported.get(key) ?? 0);
    reported.set(key, total);
    return d;
  };
}
