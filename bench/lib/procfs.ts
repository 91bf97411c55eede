// CPU time and memory of the processes under test, read from the operating system (/proc), not
// estimated: utime + stime of every process of the tree (all threads, librdkafka's included).
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { STANDBY_SLOT, WORKER_SLOT_ENV } from '../../src/process/cluster-protocol.js';

const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim());

/** The thread ids of a process, or none once it has exited. */
function tasksOf(pid: number | 'self'): string[] {
  try {
    return readdirSync(`/proc/${pid}/task`);
  } catch {
    return [];
  }
}

/** A process's or thread's name and CPU seconds (utime + stime) from its stat file, or null once gone. */
function statCpu(path: string): { name: string; seconds: number } | null {
  try {
    const stat = readFileSync(path, 'utf8');
    // Fields after the ")" that closes the command name: state is field 3, utime 14, stime 15.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { name: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')), seconds: (Number(fields[11]) + Number(fields[12])) / CLK_TCK };
  } catch {
    return null;
  }
}

/** The pid and all its descendants (the primary and its workers). */
export function processTree(pid: number): number[] {
  const out = [pid];
  // The list grows as it is walked: for-of visits what is pushed meanwhile too.
  for (const p of out) {
    for (const t of tasksOf(p)) {
      try {
        for (const c of readFileSync(`/proc/${p}/task/${t}/children`, 'utf8').trim().split(/\s+/)) if (c) out.push(Number(c));
      } catch {
        /* thread gone */
      }
    }
  }
  return out;
}

/** CPU seconds (user + system) the processes have used so far. */
export function cpuSeconds(pids: number[]): number {
  let seconds = 0;
  for (const pid of pids) seconds += statCpu(`/proc/${pid}/stat`)?.seconds ?? 0;
  return seconds;
}

/** Sum of the processes' peak resident set sizes (VmHWM), in bytes. */
export function peakRssBytes(pids: number[]): number {
  let kb = 0;
  for (const pid of pids) {
    try {
      const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (m) kb += Number(m[1]);
    } catch {
      /* exited */
    }
  }
  return kb * 1024;
}

/** TCP sockets in TIME_WAIT on this machine (/proc/net/sockstat: "TCP: inuse N orphan N tw N ..."). */
export function timeWaitSockets(): number {
  const line =
    readFileSync('/proc/net/sockstat', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('TCP:')) ?? '';
  return Number(/\btw (\d+)/.exec(line)?.[1] ?? 0);
}

export function cpuModel(): string {
  const m = /^model name\s*:\s*(.+)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'));
  return m?.[1] ?? 'unknown';
}

/** CPU seconds of this process so far by thread name ("node", "rdk:broker1", …; digits folded to #). */
export function threadCpuSeconds(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const tid of tasksOf('self')) {
    const thread = statCpu(`/proc/self/task/${tid}/stat`);
    if (thread === null) continue;
    const name = thread.name.replace(/\d+$/, '#');
    out[name] = (out[name] ?? 0) + thread.seconds;
  }
  return out;
}

/** CPU seconds so far of the service's threads, by what they do (serviceThreadsCpu). */
export interface ServiceThreadsCpu {
  /** The main thread of each serving worker: HTTP, parsing, validation, encoding, produceBatch(). */
  javascript: number;
  /** librdkafka's threads (rdk:*) in the workers: batches, requests to the brokers, acknowledgements. */
  librdkafka: number;
  /** The rest: the primary, the standby worker, V8's and libuv's helper threads. */
  other: number;
}

/**
 * The CPU of the service's process tree (primary first, as processTree returns it) split by role. A
 * worker's main thread is the thread whose id is its process id; the standby worker (its environment
 * says so, src/process/cluster-protocol.ts) serves nothing and counts as other.
 */
export function serviceThreadsCpu(pids: number[]): ServiceThreadsCpu {
  const out: ServiceThreadsCpu = { javascript: 0, librdkafka: 0, other: 0 };
  const primary = pids[0];
  const standbyEnv = `${WORKER_SLOT_ENV}=${STANDBY_SLOT}`;
  for (const pid of pids) {
    let standby: boolean;
    try {
      standby = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').includes(standbyEnv);
    } catch {
      continue; // exited
    }
    const serving = pid !== primary && !standby;
    for (const tid of tasksOf(pid)) {
      const thread = statCpu(`/proc/${pid}/task/${tid}/stat`);
      if (thread === null) continue;
      if (serving && Number(tid) === pid) out.javascript += thread.seconds;
      else if (serving && thread.name.startsWith('rdk:')) out.librdkafka += thread.seconds;
      else out.other += thread.seconds;
    }
  }
  return out;
}
