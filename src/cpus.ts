// How many workers `WORKERS=auto` means: the CPUs this process may use, as the kernel and the
// container runtime allow them.
import { readFileSync } from 'node:fs';
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
