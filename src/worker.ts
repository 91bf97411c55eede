// One worker process: a producer, an HTTP server, and the shutdown sequence.
//
//   start:    producer connects → HTTP server listens (at most 5 s later, ready or not) → tells the primary
//   shutdown: stop listening → wait for bodies being read → producer.drain (refuses new points with
//             500, flushes what it holds, bounded by SHUTDOWN_TIMEOUT_MS) → exit 0, or 4 if points
//             were still unacknowledged at the deadline
import cluster from 'node:cluster';
import { hostname } from 'node:os';
import type { Config } from './config.js';
import { EXIT } from './exit-codes.js';
import { HttpServer } from './http/server.js';
import { TrackProducer } from './kafka/producer.js';
import { createLogger } from './log.js';
import { clusterMetricsClient } from './metrics-ipc.js';
import { createWorkerMetrics } from './metrics.js';
import { buildOpenApi } from './openapi.js';

export const WORKER_READY = 'ingest:worker-listening';
export const WORKER_SHUTDOWN = 'ingest:shutdown';
const LISTEN_AFTER_PRODUCER_WAIT_MS = 5_000;

export async function runWorker(config: Config): Promise<void> {
  const workerId = String(cluster.worker?.id ?? 0);
  const log = createLogger(config.logLevel, { worker: workerId });
  const metrics = createWorkerMetrics(workerId);
  process.on('uncaughtException', (err) => {
    log.fatal({ err }, 'uncaught exception; the primary replaces this worker');
    process.exit(EXIT.CRASH);
  });

  let producer: TrackProducer;
  try {
    producer = new TrackProducer(config, log, metrics, `track-ingest-${hostname()}-${workerId}`);
  } catch (err) {
    log.fatal({ err: (err as Error).message }, 'invalid Kafka producer setting (check MQ_OPT_* variables)');
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
  const shutdown = (why: string) => {
    stopping ??= (async () => {
      const deadline = Date.now() + config.shutdownTimeoutMs;
      log.info({ why }, 'worker shutting down');
      await server.stop(Math.min(2_000, config.shutdownTimeoutMs / 4));
      const left = await producer.drain(Math.max(100, deadline - Date.now()));
      if (left > 0) {
        log.error({ unacknowledged: left, timeoutMs: config.shutdownTimeoutMs }, 'shutdown deadline reached with points not yet acknowledged by Kafka');
        process.exit(EXIT.UNFLUSHED);
      }
      if (producer.failedPoints > 0) {
        log.error({ failed: producer.failedPoints }, 'worker stopped; some accepted points failed delivery (see the earlier delivery errors)');
      } else {
        log.info('worker stopped; every accepted point was acknowledged by Kafka');
      }
      process.exit(EXIT.OK);
    })();
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  process.on('message', (m: { type?: string }) => {
    if (m?.type === WORKER_SHUTDOWN) shutdown('primary asked');
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
    log.fatal({ err: (err as Error).message }, 'cannot listen');
    process.exit(EXIT.LISTEN);
  }
  log.debug({ listen: config.listen }, 'worker listening');
  process.send?.({ type: WORKER_READY });
}
