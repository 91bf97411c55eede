// Which malloc the workers run on (WORKER_MALLOC): jemalloc when it is installed, glibc's otherwise.
//
// Why: librdkafka allocates each message in the worker's JavaScript thread (produceBatch copies it in)
// and frees it in its broker thread once Kafka acknowledged it. glibc's malloc returns every such
// chunk to the arena of the thread that allocated it, under that arena's lock, so the two threads
// meet on one lock and the JavaScript thread's next malloc finds its cache empty; jemalloc batches
// those frees. About 7 % less CPU per point at 100 points per request, about the same peak memory
// (docs/performance.md, "Memory allocator").
//
// Only the workers are started with LD_PRELOAD: the dynamic loader reads it when a process starts,
// and the primary, which allocates little, is already running. Which allocator WORKER_MALLOC means
// here (is jemalloc installed, did the operator preload one) is resolved with the rest of the
// configuration (config.ts, workerMalloc); this module forks with it and reports it.
import { readFileSync } from 'node:fs';
import type { WorkerMalloc } from '../host-resources.js';

/** The environment a worker is forked with for `malloc`: LD_PRELOAD, jemalloc ahead of any the operator set. */
export function workerMallocEnv(malloc: WorkerMalloc, env: NodeJS.ProcessEnv): Record<string, string> {
  if (malloc.preload === null) return {};
  const own = (env.LD_PRELOAD ?? '').trim();
  return { LD_PRELOAD: own === '' ? malloc.preload : `${malloc.preload} ${own}` };
}

/** Whether this process has jemalloc mapped (read in a worker, to log what it really runs on). */
export function runsOnJemalloc(): boolean {
  try {
    return readFileSync('/proc/self/maps', 'utf8').includes('libjemalloc');
  } catch {
    return false;
  }
}
