// What `auto` resolves to on this host, for config.ts: the CPUs this process may use (WORKERS=auto)
// and the allocator the workers run on (WORKER_MALLOC). Nothing here reads an environment variable of
// its own: config.ts passes the environment in.
import { existsSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';

/** CPUs this process may use: the affinity mask, capped by a cgroup CPU quota (containers, pods). */
export function usableCpus(): number {
  let cpus = availableParallelism();
  const quota = cgroupCpuQuota();
  if (quota !== null) cpus = Math.min(cpus, Math.max(1, Math.round(quota)));
  return cpus;
}

function cgroupCpuQuota(): number | null {
  try {
    // cgroup v2: "max 100000" or "<quota> <period>"
    const [quota, period] = readFileSync('/sys/fs/cgroup/cpu.max', 'utf8').trim().split(/\s+/);
    if (quota === undefined || quota === 'max' || period === undefined) return null;
    return Number(quota) / Number(period);
  } catch {
    try {
      // cgroup v1
      const quota = Number(readFileSync('/sys/fs/cgroup/cpu/cpu.cfs_quota_us', 'utf8'));
      const period = Number(readFileSync('/sys/fs/cgroup/cpu/cpu.cfs_period_us', 'utf8'));
      return quota > 0 && period > 0 ? quota / period : null;
    } catch {
      return null;
    }
  }
}

export type MallocChoice = 'auto' | 'jemalloc' | 'system';

/** Where Debian, Ubuntu, Alpine and Red Hat put jemalloc's shared library (libjemalloc2, jemalloc). */
export const JEMALLOC_PATHS = [
  '/usr/lib/x86_64-linux-gnu/libjemalloc.so.2',
  '/usr/lib/aarch64-linux-gnu/libjemalloc.so.2',
  '/usr/lib/libjemalloc.so.2',
  '/usr/lib64/libjemalloc.so.2',
] as const;

export interface WorkerMalloc {
  /** What the workers run on: jemalloc preloaded, or whatever the environment gives them. */
  name: 'jemalloc' | 'system';
  /** The library preloaded into each worker, or null. */
  preload: string | null;
  /** Why, for the start-up log: e.g. "WORKER_MALLOC=auto and LD_PRELOAD is set: left as it is". */
  reason: string;
}

/**
 * The allocator for `choice`. `auto`: jemalloc when one of JEMALLOC_PATHS exists and the operator did
 * not set LD_PRELOAD themselves; `jemalloc`: the same, or null when it is not installed (config.ts turns
 * that into an error naming WORKER_MALLOC); `system`: nothing preloaded.
 */
export function workerMalloc(choice: MallocChoice, env: NodeJS.ProcessEnv, exists: (path: string) => boolean = existsSync): WorkerMalloc | null {
  if (choice === 'system') return { name: 'system', preload: null, reason: 'WORKER_MALLOC=system' };
  const found = JEMALLOC_PATHS.find((path) => exists(path)) ?? null;
  if (choice === 'jemalloc') {
    return found === null ? null : { name: 'jemalloc', preload: found, reason: 'WORKER_MALLOC=jemalloc' };
  }
  if (ownPreload(env) !== '') return { name: 'system', preload: null, reason: 'WORKER_MALLOC=auto and LD_PRELOAD is set: left as it is' };
  if (found === null)
    return { name: 'system', preload: null, reason: 'WORKER_MALLOC=auto and jemalloc is not installed (Debian: apt-get install libjemalloc2)' };
  return { name: 'jemalloc', preload: found, reason: 'WORKER_MALLOC=auto and jemalloc is installed' };
}

/** What the operator preloads themselves ('' for nothing). */
function ownPreload(env: NodeJS.ProcessEnv): string {
  return (env.LD_PRELOAD ?? '').trim();
}
