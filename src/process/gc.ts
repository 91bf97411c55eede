// WORKER_GC: how V8 collects the workers' garbage. The supervisor forks them with the flags below.
import type { WorkerGc } from '../config.js';

/** V8's flag that keeps a process's garbage collection on its main thread. */
const SINGLE_THREADED_GC = '--single-threaded-gc';

/**
 * The workers' Node flags: the primary's own, plus `--single-threaded-gc` with WORKER_GC=single-threaded.
 * Why: there is a worker per core already, so V8's helper threads (parallel scavenges, concurrent
 * marking and sweeping, a few per process) find no idle core: they compete with the other workers,
 * librdkafka's threads and whatever else the machine runs, and a scavenge waits for its helpers. At
 * the design load of 1-point requests, 2 workers on 2 cores, single-threaded collection halved the
 * p99 and took less CPU (docs/performance.md, "Garbage collection").
 */
export function workerExecArgv(gc: WorkerGc, primaryExecArgv: readonly string[]): string[] {
  if (gc === 'parallel' || primaryExecArgv.includes(SINGLE_THREADED_GC)) return [...primaryExecArgv];
  return [...primaryExecArgv, SINGLE_THREADED_GC];
}

/** Whether this process collects its garbage on its main thread alone (for the start-up log). */
export const runsSingleThreadedGc = (): boolean => process.execArgv.includes(SINGLE_THREADED_GC);
