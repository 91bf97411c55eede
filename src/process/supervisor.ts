// The primary process: forks the workers, replaces those that die, and runs the shutdown.
// It never creates a Kafka producer (librdkafka's threads would not survive the fork).
//
//   start ──fork WORKERS (+1 standby)──▶ running ──worker exits unexpectedly──▶ back-off (none the
//     │                        │          first time) ──▶ the standby takes the dead worker's slot
//     │                        │          (or, without a ready standby, a fresh fork does) ──▶ a new
//     │                        │          standby is forked ──▶ running
//     │                        │
//     │ a worker exits 2, 3,   │ SIGTERM / SIGINT
//     │ 5 or 6 before listening▼
//     ▼                     stopping: tell every worker to shut down (each stops listening, flushes
//   stop all, exit with it     its producer, exits) ──all exited──▶ exit 0 (1 if a worker failed to flush)
//                              └─ SHUTDOWN_TIMEOUT_MS + 5 s and still running ──▶ SIGKILL, exit 1
//
// Before it forks anything the primary takes JOURNAL_DIR for the service (journal/slot-lock.ts): a
// second service given the same directory stops at once (exit 6), naming the process that holds it.
import cluster, { type Worker } from 'node:cluster';
import { diskFiles } from '../journal/files.js';
import { journalIdentity, recordInstance } from '../journal/journal-id.js';
import { JournalInUse, lockJournalDir } from '../journal/slot-lock.js';
import { workerMallocEnv } from './allocator.js';
import { workerExecArgv } from './gc.js';
import { isWorkerMessage, sendToWorker, STANDBY_SLOT, WORKER_SLOT_ENV } from './cluster-protocol.js';
import type { Config } from '../config.js';
import { EXIT, STARTUP_FAILURES } from './exit-codes.js';
import { uwsWorkerEnv } from '../http/uws.js';
import { createLogger } from '../log.js';
import { serveClusterMetrics } from '../metrics/aggregate.js';
import { createPrimaryMetrics } from '../metrics/metrics.js';

/** Restart back-off: a lone crash is replaced at once; repeated crashes (a crash loop) wait longer. */
const RESTART_BASE_MS = 100;
const RESTART_MAX_MS = 10_000;
const CRASH_WINDOW_MS = 60_000;

/**
 * How long to wait before replacing a worker that crashed at `now`, given the times of the crashes
 * before it (kept and trimmed in place: those older than a minute are forgotten). The first crash of
 * a minute is replaced at once; each more waits twice as long, from 100 ms up to 10 s.
 */
export function restartDelay(recentCrashes: number[], now: number): number {
  recentCrashes.push(now);
  while (now - (recentCrashes[0] ?? now) > CRASH_WINDOW_MS) recentCrashes.shift();
  return recentCrashes.length === 1 ? 0 : Math.min(RESTART_MAX_MS, RESTART_BASE_MS * 2 ** (recentCrashes.length - 2));
}

/** What the workers run on, for the start-up log: the uWebSockets.js build (http/uws.ts), Node, glibc. */
export interface RuntimeSummary {
  readonly uws: string;
  readonly node: string;
  readonly glibc: string | null;
}

export function runPrimary(config: Config, runtime: RuntimeSummary): void {
  const log = createLogger(config.logLevel, { role: 'primary' });
  // What ps shows, and what the lock file says of its holder to a second service given the same directory.
  process.title = 'track-ingest primary';
  holdJournalDir(config.journalDir, config.exactlyOnce?.instance ?? null);
  const metrics = createPrimaryMetrics();

  const listening = new Set<number>();
  /** Worker id → slot: a replacement takes its predecessor's slot, and with it its spill journal. */
  const slots = new Map<number, number>();
  /** The idle, booted worker that replaces the next one to die (STANDBY_WORKER=1), once it is ready. */
  let standby: Worker | null = null;
  let standbyReady = false;
  // Scrapes cover the workers that serve; a replacement joins once it listens.
  serveClusterMetrics(metrics.registry, () => Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined && listening.has(w.id)));
  const recentCrashes: number[] = [];
  let stopping = false;
  let failedShutdown = false;
  /** The status the service ends with when not its own choice: EXIT.FENCED. */
  let exitCode: number | null = null;
  let announced = false;
  // Read by each worker's process at exec: LD_PRELOAD of jemalloc (allocator.ts), or nothing.
  // What a worker needs in its environment before it starts: its malloc (preloaded), and the limits
  // uWebSockets.js reads when it loads.
  const workerEnv = { ...workerMallocEnv(config.workerMalloc, process.env), ...uwsWorkerEnv(config.maxHeaderBytes) };
  cluster.setupPrimary({ execArgv: workerExecArgv(config.workerGc, process.execArgv) });

  const forkStandby = (): void => {
    if (!config.standbyWorker || stopping || standby !== null) return;
    const worker = cluster.fork({ ...workerEnv, [WORKER_SLOT_ENV]: STANDBY_SLOT });
    standby = worker;
    standbyReady = false;
    worker.on('message', (m: unknown) => {
      if (isWorkerMessage(m) && m.type === 'ingest:standby-ready' && standby === worker) standbyReady = true;
    });
    watchWorker(worker);
  };

  /** Gives `slot` to the ready standby (true), or says there is none. */
  const activateStandby = (slot: number): boolean => {
    const worker = standby;
    if (worker === null || !standbyReady || !worker.isConnected()) return false;
    standby = null;
    slots.set(worker.id, slot);
    sendToWorker(worker, { type: 'ingest:standby-activate', slot });
    metrics.workers.set(slots.size);
    forkStandby();
    return true;
  };

  const fork = (slot: number): Worker => {
    const worker = cluster.fork({ ...workerEnv, [WORKER_SLOT_ENV]: String(slot) });
    slots.set(worker.id, slot);
    metrics.workers.set(slots.size);
    watchWorker(worker);
    return worker;
  };

  const watchWorker = (worker: Worker): void => {
    worker.on('message', (m: unknown) => {
      if (!isWorkerMessage(m) || m.type !== 'ingest:worker-listening') return;
      listening.add(worker.id);
      if (!announced && listening.size === config.workers) {
        announced = true;
        const { host, port } = config.listen;
        log.info({ workers: config.workers, listen: `${host || '*'}:${port}`, brokers: config.brokers, topic: config.topic }, 'service listening');
      }
    });
  };

  cluster.on('exit', (worker, code, signal) => {
    const wasListening = listening.delete(worker.id);
    const slot = slots.get(worker.id);
    slots.delete(worker.id);
    metrics.workers.set(slots.size);
    if (stopping) {
      // A standby is ended with a signal (it may not yet listen for messages): its status says nothing.
      if (code !== EXIT.OK && slot !== undefined) {
        failedShutdown = true;
        // A worker that dies of a signal (a native crash) logs nothing itself: say what ended it.
        log.error({ worker: worker.id, slot, pid: worker.process.pid, code, signal }, 'a worker did not stop cleanly during the shutdown');
      }
      if (Object.keys(cluster.workers ?? {}).length === 0) {
        log.info({ ok: !failedShutdown }, 'all workers stopped');
        process.exit(exitCode ?? (failedShutdown ? EXIT.CRASH : EXIT.OK));
      }
      return;
    }
    if (slot === undefined) {
      // The standby died before it was needed: fork another one, not in a hurry.
      if (standby === worker) standby = null;
      log.warn({ worker: worker.id, code, signal }, 'standby worker exited; forking another');
      setTimeout(forkStandby, 1_000).unref();
      return;
    }
    if (code === EXIT.FENCED) {
      // Another process runs as this instance (INSTANCE_ID): fencing it back would only start a fight.
      log.fatal(
        { worker: worker.id, slot, instance: config.exactlyOnce?.instance },
        "a worker was fenced: another process took its slot's transactional.id (the same INSTANCE_ID elsewhere); this instance stops, its journal kept for its next start",
      );
      exitCode = EXIT.FENCED;
      shutdown('fenced');
      return;
    }
    // A configuration or listen error will not heal by restarting: stop the whole service. A
    // configuration error may come after listening too (a Schema Registry that refuses the schema
    // once it answers: schema-registry/registration.ts).
    if (code === EXIT.CONFIG || (!wasListening && STARTUP_FAILURES.has(code))) {
      log.fatal({ worker: worker.id, code }, 'a worker could not start; stopping the service');
      stopping = true;
      for (const w of Object.values(cluster.workers ?? {})) w?.kill('SIGKILL');
      process.exit(code);
    }
    const delay = restartDelay(recentCrashes, Date.now());
    metrics.workerRestarts.inc();
    log.error(
      { worker: worker.id, slot, pid: worker.process.pid, code, signal, restartInMs: delay, crashesLastMinute: recentCrashes.length },
      'worker exited unexpectedly; replacing it',
    );
    const replace = () => {
      if (!stopping && !activateStandby(slot)) fork(slot);
    };
    if (delay === 0) replace();
    else setTimeout(replace, delay);
  });

  const shutdown = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal, timeoutMs: config.shutdownTimeoutMs }, 'shutting down: draining workers and flushing producers');
    const workers = Object.values(cluster.workers ?? {});
    if (workers.length === 0) process.exit(exitCode ?? EXIT.OK);
    for (const w of workers) {
      if (w === undefined) continue;
      if (!slots.has(w.id))
        w.process.kill('SIGTERM'); // the standby holds nothing to flush
      else if (w.isConnected()) sendToWorker(w, { type: 'ingest:shutdown' });
    }
    setTimeout(() => {
      log.error('workers did not stop in time; killing them');
      for (const w of Object.values(cluster.workers ?? {})) w?.kill('SIGKILL');
      process.exit(EXIT.CRASH);
    }, config.shutdownTimeoutMs + 5_000).unref();
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));

  const { name: malloc, preload, reason } = config.workerMalloc;
  log.info({ workers: config.workers, malloc, preload, reason, ...runtime }, 'starting workers');
  for (let slot = 0; slot < config.workers; slot++) fork(slot);
  forkStandby();
}

/**
 * Takes JOURNAL_DIR for this service's life (creating it, durably, if missing), and with exactly
 * once gives it its identity and records the instance (journal/journal-id.ts) before any worker reads
 * them; stops the process when another service holds it (exit 6) or it cannot be used (exit 2). The
 * lock goes with the process: nothing releases it but its end.
 */
function holdJournalDir(dir: string, instance: string | null): void {
  try {
    lockJournalDir(diskFiles, dir);
    if (instance !== null) {
      journalIdentity(diskFiles, dir);
      recordInstance(diskFiles, dir, instance);
    }
  } catch (err) {
    if (err instanceof JournalInUse) {
      process.stderr.write(`cannot start: ${err.message}\n`);
      process.exit(EXIT.JOURNAL_IN_USE);
    }
    process.stderr.write(`configuration error: JOURNAL_DIR: cannot use the journal directory ${dir}: ${(err as Error).message}\n`);
    process.exit(EXIT.CONFIG);
  }
}
