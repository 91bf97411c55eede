// The processes of a running service, for the tests that kill them.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import type { Service } from './service.js';

/** user + system CPU time of a process so far, in clock ticks (/proc/PID/stat fields 14 and 15). */
export function cpuTicks(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

/** The serving workers (not the standby): each names its slot in its process title. */
export function workerPids(svc: Service): number[] {
  return servicePids(svc)
    .slice(1)
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith('track-ingest worker');
      } catch {
        return false;
      }
    });
}

/** Every process of the service: the primary first, then its workers and its standby (its children). */
export function servicePids(svc: Service): number[] {
  let children: number[] = [];
  try {
    children = execFileSync('pgrep', ['-P', String(svc.proc.pid)])
      .toString()
      .trim()
      .split('\n')
      .map(Number);
  } catch {
    /* no children: pgrep exits 1 */
  }
  return [svc.proc.pid!, ...children];
}
