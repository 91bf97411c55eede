// CPU time and memory of the processes under test, read from the operating system (/proc), not
// estimated: utime + stime of every process of the tree (all threads, librdkafka's included).
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim());

/** The pid and all its descendants (the primary and its workers). */
export function processTree(pid: number): number[] {
  const out = [pid];
  for (let i = 0; i < out.length; i++) {
    const p = out[i]!;
    let tasks: string[] = [];
    try {
      tasks = readdirSync(`/proc/${p}/task`);
    } catch {
      continue;
    }
    for (const t of tasks) {
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
  let ticks = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // Fields after the ")" that closes the command name: state is field 3, utime 14, stime 15.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      /* exited */
    }
  }
  return ticks / CLK_TCK;
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

export function cpuModel(): string {
  const m = /^model name\s*:\s*(.+)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'));
  return m?.[1] ?? 'unknown';
}

/** CPU seconds of this process so far by thread name ("node", "rdk:broker1", …; digits folded to #). */
export function threadCpuSeconds(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const tid of readdirSync('/proc/self/task')) {
    try {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')).replace(/\d+$/, '#');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      out[name] = (out[name] ?? 0) + (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
    } catch {
      /* thread gone */
    }
  }
  return out;
}

/** CPU seconds so far of the service's threads, by what they do (see serviceThreadRole). */
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
 * says INGEST_WORKER_SLOT=standby, src/cluster-protocol.ts) serves nothing and counts as other.
 */
export function serviceThreadsCpu(pids: number[]): ServiceThreadsCpu {
  const out: ServiceThreadsCpu = { javascript: 0, librdkafka: 0, other: 0 };
  const primary = pids[0];
  for (const pid of pids) {
    let standby = false;
    try {
      standby = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').includes('INGEST_WORKER_SLOT=standby');
    } catch {
      continue; // exited
    }
    let tasks: string[] = [];
    try {
      tasks = readdirSync(`/proc/${pid}/task`);
    } catch {
      continue;
    }
    for (const tid of tasks) {
      try {
        const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
        const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
        const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        const seconds = (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
        const serving = pid !== primary && !standby;
        if (serving && Number(tid) === pid) out.javascript += seconds;
        else if (serving && name.startsWith('rdk:')) out.librdkafka += seconds;
        else out.other += seconds;
      } catch {
        /* thread gone */
      }
    }
  }
  return out;
}
