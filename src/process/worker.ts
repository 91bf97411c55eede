// One worker process: a journal, a producer, an HTTP server, and the shutdown sequence.
//
//   start:    journal opened (what an earlier process of this slot left is found) → producer connects
//             → HTTP server listens (at most 5 s later, ready or not) → tells the primary; what the
//             journal holds from before is produced again once Kafka takes points
//   shutdown: stop listening → wait for bodies being read → producer.drain (refuses new points with
//             500, flushes what it holds, bounded by SHUTDOWN_TIMEOUT_MS) → journal closed → exit 0:
//             in ACK_MODE=async what Kafka has not acknowledged stays in the journal for the next
//             start; ACK_MODE=delivered exits 4 if points were still unacknowledged at the deadline
//   fatal producer error: the same shutdown, then exit 1 so that the primary starts a fresh worker
import cluster from 'node:cluster';
import { hostname } from 'node:os';
import { runsOnJemalloc } from './allocator.js';
import { runsSingleThreadedGc } from './gc.js';
import { isPrimaryMessage, sendToPrimary, workerSlot } from './cluster-protocol.js';
import type { Config } from '../config.js';
import { EXIT } from './exit-codes.js';
import { HttpServer } from '../http/server.js';
import { TrackProducer } from '../kafka/producer.js';
import { producerSettings } from '../kafka/settings.js';
import { Journal, JournalError } from '../journal/journal.js';
import { createLogger, type Logger } from '../log.js';
import { clusterMetricsClient } from '../metrics/aggregate.js';
import { createWorkerMetrics } from '../metrics/metrics.js';
import { buildOpenApi } from '../api/openapi.js';

const LISTEN_AFTER_PRODUCER_WAIT_MS = 5_000;

export async function runWorker(config: Config): Promise<void> {
  const workerId = String(cluster.worker?.id ?? 0);
  const log = createLogger(config.logLevel, { worker: workerId });
  const metrics = createWorkerMetrics(workerId);
  process.on('uncaughtException', (err) => {
    log.fatal({ err }, 'uncaught exception; the primary replaces this worker');
    process.exit(EXIT.CRASH);
  });

  const slot = workerSlot() ?? (await standBy(log));
  process.title = `track-ingest worker ${slot}`;
  metrics.loopDelay.start();
  let journal: Journal;
  try {
    journal = new Journal({
      dir: config.journalDir,
      slot,
      slots: config.workers,
      maxBytes: config.journalMaxBytes,
      sync: config.journalSync,
      syncIntervalMs: config.journalSyncIntervalMs,
      onCommit: (seconds) => metrics.journalSync.observe(seconds),
      onCorrupt: (file, at, what) => log.error({ file, at }, `journal file: ${what}`),
    });
  } catch (err) {
    log.fatal({ err }, 'cannot open the journal (check JOURNAL_DIR)');
    process.stderr.write(`configuration error: JOURNAL_DIR: ${err instanceof JournalError ? err.message : String(err)}\n`);
    process.exit(EXIT.CONFIG);
  }
  log.info({ slot, ackMode: config.ackMode, journalSync: config.journalSync, journalWrites: journal.mappedOn === null ? 'pwritev' : `mapped (${journal.mappedOn})`, malloc: runsOnJemalloc() ? 'jemalloc' : 'system', gc: runsSingleThreadedGc() ? 'single-threaded' : 'parallel' }, 'worker started');
  if (journal.recovering) log.warn({ dir: config.journalDir, slot, bytes: journal.bytes }, 'the journal holds points an earlier process did not see acknowledged; producing them again once Kafka takes points');

  let producer: TrackProducer;
  try {
    producer = new TrackProducer(config, log, metrics, journal, producerSettings(config, `track-ingest-${hostname()}-${workerId}`));
  } catch (err) {
    // The primary checked the settings before forking: this is librdkafka refusing them at creation.
    log.fatal({ err }, 'invalid Kafka producer setting (check MQ_OPT_* variables)');
    process.exit(EXIT.CONFIG);
  }
  producer.start();

  const server = new HttpServer({
    config,
    log,
    metrics,
    producer,
    workerId,
    clusterMetrics: clusterMetricsClient(metrics.registry),
    openApiJson: JSON.stringify(buildOpenApi(config)),
  });

  let stopping: Promise<void> | null = null;
  const shutdown = (why: string, exitCode: number = EXIT.OK) => {
    stopping ??= (async () => {
      const deadline = Date.now() + config.shutdownTimeoutMs;
      log.info({ why }, 'worker shutting down');
      await server.stop(Math.min(2_000, config.shutdownTimeoutMs / 4));
      const left = await producer.drain(Math.max(100, deadline - Date.now()));
      try {
        journal.close();
      } catch (err) {
        log.error({ err }, 'cannot close the journal on shutdown');
      }
      // Answers that waited for Kafka (delivered) or the disk (JOURNAL_SYNC=disk): let the sockets take them.
      await server.settled(Math.max(100, deadline - Date.now()));
      if (config.ackMode === 'delivered') {
        if (left > 0) {
          log.error({ unacknowledged: left, timeoutMs: config.shutdownTimeoutMs }, 'shutdown deadline reached with points not yet acknowledged by Kafka');
          process.exit(EXIT.UNFLUSHED);
        }
        log.info('worker stopped; every request was answered after Kafka acknowledged or failed its points (failed ones: 500)');
      } else if (left > 0) {
        log.warn({ unacknowledged: left, records: journal.records, journalBytes: journal.bytes, dir: config.journalDir }, 'worker stopped with points Kafka has not acknowledged: they stay in the journal and are produced again at the next start of this slot');
      } else {
        log.info({ journalBytes: journal.bytes }, 'worker stopped; every accepted point was acknowledged by Kafka');
      }
      process.exit(exitCode);
    })();
  };
  producer.onFatal = () => shutdown('fatal producer error', EXIT.CRASH);
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  process.on('message', (m: unknown) => {
    if (isPrimaryMessage(m) && m.type === 'ingest:shutdown') shutdown('primary asked');
  });
  // The primary is gone (killed with SIGKILL): do not linger as an orphan holding the port.
  process.on('disconnect', () => shutdown('primary disconnected'));

  // Listen once the producer can take points: with SO_REUSEPORT the kernel sends a listening worker
  // its share of new connections, and a worker that is still connecting could only answer them 500
  // (at start-up, and when replacing a crashed worker while the others serve). Bounded, so that
  // /healthz answers and /readyz explains while Kafka is unreachable. The shutdown handlers above
  // are in place first, so a signal during this wait still ends the worker in order.
  if (!(await producer.whenAccepting(LISTEN_AFTER_PRODUCER_WAIT_MS))) {
    log.warn({ waitedMs: LISTEN_AFTER_PRODUCER_WAIT_MS, brokers: config.brokers }, 'listening before the Kafka producer is ready; POST /track answers 500 until it is');
  }
  if (stopping !== null) return;
  try {
    await server.listen();
  } catch (err) {
    log.fatal({ err }, 'cannot listen');
    process.exit(EXIT.LISTEN);
  }
  log.debug({ listen: config.listen }, 'worker listening');
  sendToPrimary({ type: 'ingest:worker-listening' });
}

/**
 * A standby has loaded every module (what takes most of a worker's start: about a second on a busy
 * 2-core machine) and waits. When a worker dies, the primary hands the standby its slot, and it
 * starts from here: journal, producer, listen, in a few hundred milliseconds.
 */
function standBy(log: Logger): Promise<number> {
  process.title = 'track-ingest standby';
  return new Promise((resolve) => {
    const exit = () => process.exit(EXIT.OK);
    const onMessage = (m: unknown) => {
      if (!isPrimaryMessage(m)) return;
      if (m.type === 'ingest:shutdown') exit();
      if (m.type !== 'ingest:standby-activate') return;
      for (const signal of ['SIGTERM', 'SIGINT'] as const) process.off(signal, exit);
      process.off('disconnect', exit);
      process.off('message', onMessage);
      log.info({ slot: m.slot }, 'standby worker takes over a slot');
      resolve(m.slot);
    };
    process.on('SIGTERM', exit);
    process.on('SIGINT', exit);
    process.on('disconnect', exit);
    process.on('message', onMessage);
    sendToPrimary({ type: 'ingest:standby-ready' });
  });
}
