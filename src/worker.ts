// One worker process: a producer, an HTTP server, and the shutdown sequence.
//
//   start:    spill journal opened (files of an earlier run found) → producer connects → HTTP server
//             listens (at most 5 s later, ready or not) → tells the primary; the journal is replayed
//             in the background whenever it holds points and Kafka is reachable
//   shutdown: stop listening → wait for bodies being read → stop a replay → producer.drain (refuses
//             new points with 500, flushes what it holds, bounded by SHUTDOWN_TIMEOUT_MS; failures go
//             to the journal) → journal closed (on disk) → exit 0, or 4 if points were still
//             unacknowledged at the deadline
//   fatal producer error: the same shutdown, then exit 1 so that the primary starts a fresh worker
import cluster from 'node:cluster';
import { hostname } from 'node:os';
import { runsOnJemalloc } from './allocator.js';
import { isPrimaryMessage, sendToPrimary, workerSlot } from './cluster-protocol.js';
import type { Config } from './config.js';
import { EXIT } from './exit-codes.js';
import { HttpServer } from './http/server.js';
import { TrackProducer } from './kafka/producer.js';
import { producerSettings } from './kafka/settings.js';
import { SpillJournal } from './kafka/spill-journal.js';
import { SpillReplayer } from './kafka/spill-replay.js';
import { createLogger, type Logger } from './log.js';
import { clusterMetricsClient } from './metrics-ipc.js';
import { createWorkerMetrics } from './metrics.js';
import { buildOpenApi } from './openapi.js';

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
  let journal: SpillJournal;
  try {
    journal = new SpillJournal({
      dir: config.spillDir,
      slot,
      slots: config.workers,
      maxBytes: config.spillMaxBytes,
      onCorrupt: (file, validBytes, fileBytes) =>
        log.error({ file, validBytes, fileBytes }, 'spill journal file ends in a torn or corrupt record; replaying the records before it'),
      onWriteError: (err, records) => {
        log.error({ err, records }, 'spill journal write failed: these points are lost; POST /track answers 500 until writes succeed');
        producer.journalWriteFailed(records);
      },
    });
  } catch (err) {
    log.fatal({ err }, 'cannot open the spill journal (check SPILL_DIR)');
    process.exit(EXIT.CONFIG);
  }
  metrics.setSpillSource(() => journal.bytes);
  log.info({ slot, ackMode: config.ackMode, malloc: runsOnJemalloc() ? 'jemalloc' : 'system' }, 'worker started');
  if (!journal.isEmpty) log.warn({ dir: config.spillDir, slot, bytes: journal.bytes }, 'spill journal holds points from an earlier run; replaying them once Kafka is reachable');

  let producer: TrackProducer;
  try {
    producer = new TrackProducer(config, log, metrics, journal, producerSettings(config, `track-ingest-${hostname()}-${workerId}`));
  } catch (err) {
    // The primary checked the settings before forking: this is librdkafka refusing them at creation.
    log.fatal({ err }, 'invalid Kafka producer setting (check MQ_OPT_* variables)');
    process.exit(EXIT.CONFIG);
  }
  producer.start();
  const replayer = new SpillReplayer({
    journal,
    topic: config.topic,
    settings: producer.settings,
    log,
    metrics,
    // Not readiness: a full journal makes the worker unready, and only a replay can empty it.
    brokerAvailable: () => producer.kafkaAvailable(),
  });
  replayer.start();

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
      await replayer.stop();
      const left = await producer.drain(Math.max(100, deadline - Date.now()));
      // What failed during the drain is in the journal's write buffer: on disk before the process exits.
      try {
        journal.close();
      } catch (err) {
        log.error({ err }, 'cannot write the spill journal on shutdown');
      }
      // delivered mode: the last acknowledgements were answered just now; let the sockets take them.
      await server.settled(Math.max(100, deadline - Date.now()));
      if (left > 0) {
        log.error({ unacknowledged: left, timeoutMs: config.shutdownTimeoutMs }, 'shutdown deadline reached with points not yet acknowledged by Kafka');
        process.exit(EXIT.UNFLUSHED);
      }
      const failed = producer.failedPoints;
      const accounting = { failed, spilled: producer.spilledPoints, lost: producer.lostPoints, journalBytes: journal.bytes };
      if (config.ackMode === 'delivered') log.info(accounting, 'worker stopped; every request was answered after Kafka acknowledged or failed its points (failed ones: 500)');
      else if (producer.lostPoints > 0) log.error(accounting, 'worker stopped; some accepted points failed delivery and could not be spilled (see the earlier errors)');
      else if (failed > 0) log.warn(accounting, 'worker stopped; accepted points that failed delivery are in the spill journal and are replayed at the next start');
      else log.info(accounting, 'worker stopped; every accepted point was acknowledged by Kafka');
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
