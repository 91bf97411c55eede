// One worker process: its journal slot, the write-ahead path (journal and producer), an HTTP server,
// and the shutdown sequence.
//
//   start:    the slot's lock (journal/slot-lock.ts: waiting while a process of an earlier service still
//             drains it) → journal opened (what an earlier process of this slot left is found) →
//             producer connects → HTTP server listens (at most 5 s later, ready or not) → tells the
//             primary; what the journal holds from before is produced again once Kafka takes points
//   shutdown: stop listening → wait for bodies being read → wait for the journal to empty (what
//             failed and is retried, what an earlier process left) → drain (refuses new points with
//             500, flushes what it holds; all of it bounded by SHUTDOWN_TIMEOUT_MS) → journal closed →
//             exit 0: in ACK_MODE=async what Kafka has not acknowledged stays in the journal for the
//             next start, or `drain` (process/drain.ts); ACK_MODE=delivered exits 4 if points were
//             still unacknowledged at the deadline
//   fatal producer error, or the journal failed (a disk error): the same shutdown, then exit 1 so that
//             the primary starts a fresh worker, which recovers from what the disk holds
import cluster from 'node:cluster';
import { hostname } from 'node:os';
import { buildOpenApi } from '../api/openapi.js';
import { transactionalId, type Config } from '../config.js';
import { HttpServer } from '../http/server.js';
import { warmUpTrackBody } from '../http/track-body-warm-up.js';
import { registryFraming } from '../track-point/registry-encode.js';
import { diskFiles } from '../journal/files.js';
import { Journal, JournalError } from '../journal/journal.js';
import { journalIdentity } from '../journal/journal-id.js';
import { claimSlots, JournalInUse, type SlotClaim } from '../journal/slot-lock.js';
import { kafkaClientBuild } from '../kafka/client-build.js';
import { KafkaProducer } from '../kafka/producer.js';
import { RefusedProducer } from '../kafka/refused-producer.js';
import { producerSettings, refusedProducerSettings } from '../kafka/settings.js';
import { createLogger, type Logger } from '../log.js';
import { clusterMetricsClient } from '../metrics/aggregate.js';
import { createWorkerMetrics } from '../metrics/metrics.js';
import { RefusedRequests } from '../refused/refused-requests.js';
import { SchemaRegistration } from '../schema-registry/registration.js';
import { gatedOnSchema } from '../schema-registry/schema-gate.js';
import type { DeliverySink } from '../write-ahead/acceptance.js';
import { sinkOfMode } from '../write-ahead/delivery-mode.js';
import type { ExactlyOnceSink } from '../write-ahead/exactly-once.js';
import { runsOnJemalloc } from './allocator.js';
import { isPrimaryMessage, sendToPrimary, workerSlot } from './cluster-protocol.js';
import { EXIT } from './exit-codes.js';
import { runsSingleThreadedGc } from './gc.js';
import { LISTEN_AFTER_PRODUCER_WAIT_MS, startTransactions } from './slot-transactions.js';

/** How long past SHUTDOWN_TIMEOUT_MS a worker waits for its slot while an earlier process holds it (that process drains for at most SHUTDOWN_TIMEOUT_MS). */
const SLOT_WAIT_MARGIN_MS = 5_000;

export async function runWorker(config: Config): Promise<void> {
  const workerId = String(cluster.worker?.id ?? 0);
  const log = createLogger(config.logLevel, { worker: workerId });
  const metrics = createWorkerMetrics(workerId);
  process.on('uncaughtException', (err) => {
    log.fatal({ err }, 'uncaught exception; the primary replaces this worker');
    process.exit(EXIT.CRASH);
  });

  // POST /track's decoding compiled for refused bodies as well as valid ones (track-body-warm-up.ts
  // says why): first, before anything of the worker runs in the background (a standby, too, so that
  // it takes a slot over warm). It blocks the thread for 70 to 150 ms.
  // A registry MQ_VALUE_FORMAT's decoding is warmed up here too, with a schema id of 0: its single
  // pass is compiled once per format, whatever the id (single-pass.ts, singlePassFor). A second
  // warm-up later, once the id was known, left every request at 1 point about 4 % dearer in steady
  // state (bench/HISTORY.md, "2026-12-07, later: Schema Registry value formats").
  const warmUpFraming = config.schemaRegistry === null ? null : registryFraming(config.schemaRegistry.format, 0);
  const warmUpMs = warmUpTrackBody({ maxBodyBytes: config.maxBodyBytes, maxPoints: config.maxPoints }, warmUpFraming);
  log.debug({ warmUpMs: Math.round(warmUpMs) }, 'POST /track decoding warmed up');

  const slot = workerSlot() ?? (await standBy(log));
  process.title = `track-ingest worker ${slot}`;
  metrics.loopDelay.start();
  const claim = await claimSlot(config, slot, log);
  let journal: Journal;
  try {
    journal = new Journal({
      dir: config.journalDir,
      claim,
      maxBytes: config.journalMaxBytes,
      sync: config.journalSync,
      syncIntervalMs: config.journalSyncIntervalMs,
      onCommit: (seconds) => metrics.journalSync.observe(seconds),
      onDamage: (file, at, records, what) => log.error({ file, at, records }, `journal file damaged: ${what}; skipped, the records after it are read on`),
      // A disk that fails a write or a sync: stop, and let a fresh worker recover from what the disk
      // holds (journal/group-commit.ts says why a failed sync is never tried again).
      onFailure: (err) => {
        log.fatal(
          { err, dir: config.journalDir, slot },
          'the journal failed: this worker takes no more points (500 journal_failed, /readyz 503) and is restarted to recover from what the disk holds',
        );
        shutdown('the journal failed', EXIT.CRASH);
      },
    });
  } catch (err) {
    log.fatal({ err }, 'cannot open the journal (check JOURNAL_DIR)');
    process.stderr.write(`configuration error: JOURNAL_DIR: ${err instanceof JournalError ? err.message : String(err)}\n`);
    process.exit(EXIT.CONFIG);
  }
  // Created by the primary before it forked (journal/journal-id.ts): this reads it back.
  let journalId: string | null = null;
  if (config.exactlyOnce !== null) {
    try {
      journalId = journalIdentity(diskFiles, config.journalDir);
    } catch (err) {
      log.fatal({ err }, "cannot read the journal directory's identity (check JOURNAL_DIR)");
      process.stderr.write(`configuration error: JOURNAL_DIR: ${(err as Error).message}\n`);
      process.exit(EXIT.CONFIG);
    }
  }
  const kafkaClient = kafkaClientBuild();
  metrics.buildInfo.set({ client: kafkaClient.client, client_version: kafkaClient.clientVersion, librdkafka: kafkaClient.librdkafka }, 1);
  log.info(
    {
      slot,
      slots: [...claim.slots],
      kafkaClient: `${kafkaClient.client} ${kafkaClient.clientVersion}`,
      librdkafka: kafkaClient.librdkafka,
      journal: journalId ?? undefined,
      refusedTopic: config.refused?.topic ?? 'off',
      ackMode: config.ackMode,
      journalSync: config.journalSync,
      journalWrites: journal.mappedOn === null ? 'pwritev' : `mapped (${journal.mappedOn})`,
      malloc: runsOnJemalloc() ? 'jemalloc' : 'system',
      gc: runsSingleThreadedGc() ? 'single-threaded' : 'parallel',
    },
    'worker started',
  );
  if (journal.recovering)
    log.warn(
      { dir: config.journalDir, slot, bytes: journal.bytes },
      'the journal holds points an earlier process did not see acknowledged; producing them again once Kafka takes points',
    );

  let path: DeliverySink;
  let transactional: ExactlyOnceSink | null;
  let refusedProducer: RefusedProducer | null = null;
  try {
    const txnId = config.exactlyOnce === null ? null : transactionalId(config.exactlyOnce, slot);
    const settings = producerSettings(config, `track-ingest-${hostname()}-${workerId}`, txnId);
    ({ sink: path, exactlyOnce: transactional } = sinkOfMode(
      {
        config,
        log,
        metrics,
        journal,
        producer: (events) => new KafkaProducer(config, log, metrics, settings, events),
        events: {
          onFatal: (fenced) =>
            fenced
              ? shutdown(`fenced: another process took this slot's transactional.id (INSTANCE_ID=${config.exactlyOnce?.instance})`, EXIT.FENCED)
              : shutdown('fatal producer error', EXIT.CRASH),
        },
      },
      journalId,
    ));
    if (config.refused !== null) {
      const refusedSettings = refusedProducerSettings(config, `track-ingest-refused-${hostname()}-${workerId}`, config.refused);
      const { topic, idleMs, ratePerSecond } = config.refused;
      refusedProducer = new RefusedProducer(
        topic,
        refusedSettings,
        log,
        (error) => {
          if (error === null) metrics.refusedWritten.inc();
          else metrics.refusedDropped.failed++;
        },
        { idleMs, ratePerSecond },
      );
    }
  } catch (err) {
    // The primary checked the settings before forking: this is librdkafka refusing them at creation.
    log.fatal({ err }, 'invalid Kafka producer setting (check MQ_OPT_* variables)');
    process.exit(EXIT.CONFIG);
  }
  path.start();
  refusedProducer?.start();
  // MQ_VALUE_FORMAT other than json: the schema's id is asked of the registry beside Kafka's
  // connection; no point is taken before it is known (schema-registry/registration.ts).
  const registration =
    config.schemaRegistry === null
      ? null
      : new SchemaRegistration(config.schemaRegistry, log, (message) => {
          log.fatal({ registry: config.schemaRegistry?.url }, message);
          process.stderr.write(`configuration error: MQ_VALUE_FORMAT: ${message}\n`);
          process.exit(EXIT.CONFIG);
        });
  registration?.start();
  const refused =
    config.refused === null || refusedProducer === null
      ? null
      : new RefusedRequests(config.refused, refusedProducer, `${hostname()}/${slot}`, (reason) => void metrics.refusedDropped[reason]++);

  const server = new HttpServer({
    config,
    log,
    metrics,
    sink: registration === null ? path : gatedOnSchema(path, registration),
    ...(registration === null ? {} : { values: registration }),
    workerId,
    clusterMetrics: clusterMetricsClient(metrics.registry),
    openApiJson: JSON.stringify(buildOpenApi(config)),
    refused,
  });

  // The journal's and the sink's failures call this; they come through the poll and the disk's
  // callbacks, after this synchronous start has defined it.
  let stopping: Promise<void> | null = null;
  const shutdown = (why: string, exitCode: number = EXIT.OK) => {
    stopping ??= (async () => {
      const deadline = Date.now() + config.shutdownTimeoutMs;
      log.info({ why }, 'worker shutting down');
      registration?.stop();
      await server.stop(Math.min(2_000, config.shutdownTimeoutMs / 4));
      // Asked to stop (a scale-down, a rolling update): what the journal holds goes to Kafka first,
      // retries and an earlier process's records included, so that no pod leaves a journal behind
      // while Kafka takes points. A failed producer or journal cannot empty it: no wait then.
      if (exitCode === EXIT.OK) await path.whenEmptied(deadline - Math.min(2_000, config.shutdownTimeoutMs / 4));
      const left = await path.drain(Math.max(100, deadline - Date.now()));
      // The refused requests still queued get what is left of a second: evidence, not data.
      await refusedProducer?.stop(Math.min(deadline, Date.now() + 1_000));
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
        log.warn(
          { unacknowledged: left, records: journal.records, journalBytes: journal.bytes, dir: config.journalDir },
          'worker stopped with points Kafka has not acknowledged: they stay in the journal and are produced again at the next start of this slot',
        );
      } else {
        log.info({ journalBytes: journal.bytes }, 'worker stopped; every accepted point was acknowledged by Kafka');
      }
      process.exit(exitCode);
    })();
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  process.on('message', (m: unknown) => {
    if (isPrimaryMessage(m) && m.type === 'ingest:shutdown') shutdown('primary asked');
  });
  // The primary gone (killed with SIGKILL): Node's cluster ends the worker as soon as it sees its
  // channel close (lib/internal/cluster/child.js, process.exit at once), before any handler of ours;
  // what Kafka had not acknowledged stays in the journal. A worker that cannot see it yet (stopped,
  // or busy) holds its slot meanwhile, and the next service's worker of that slot waits for it.

  // Listen once the producer can take points: with SO_REUSEPORT the kernel sends a listening worker
  // its share of new connections, and a worker that is still connecting could only answer them 500
  // (at start-up, and when replacing a crashed worker while the others serve). Bounded, so that
  // /healthz answers and /readyz explains while Kafka is unreachable. The shutdown handlers above
  // are in place first, so a signal during this wait still ends the worker in order.
  // The refused-requests producer is not waited for: the first refusals wait for its connection
  // (refused-producer.ts).
  const accepting = await path.whenAccepting(LISTEN_AFTER_PRODUCER_WAIT_MS);
  if (!accepting) {
    log.warn(
      { waitedMs: LISTEN_AFTER_PRODUCER_WAIT_MS, brokers: config.brokers },
      'listening before the Kafka producer is ready; POST /track answers 500 until it is',
    );
  }
  // A registry that refuses the schema stops the start before this worker listens; one that does not
  // answer yet leaves it listening with /readyz at 503, as Kafka does.
  if (registration !== null && !(await registration.whenRegistered(LISTEN_AFTER_PRODUCER_WAIT_MS)))
    log.warn(
      { registry: config.schemaRegistry?.url },
      'listening before the Schema Registry gave the value schema id; POST /track answers 500 schema_unknown until it does',
    );
  if (stopping !== null) return;
  if (transactional !== null && !(await startTransactions(config, transactional, claim, log, accepting, () => stopping !== null))) return;
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
 * The slot's lock, before anything of the slot is touched; slot 0 also takes the slots of a larger
 * WORKERS of before that nobody holds. A slot held by another process (a worker of an earlier service
 * still draining after its primary was killed) is waited for; still held after that process's
 * SHUTDOWN_TIMEOUT_MS and a margin, the worker stops with JOURNAL_IN_USE, and the service with it.
 */
async function claimSlot(config: Config, slot: number, log: Logger): Promise<SlotClaim> {
  try {
    return await claimSlots({
      files: diskFiles,
      dir: config.journalDir,
      slot,
      slotsInUse: config.workers,
      waitMs: config.shutdownTimeoutMs + SLOT_WAIT_MARGIN_MS,
      onWait: (holder, lockPath) =>
        log.warn(
          { slot, holder, lock: lockPath },
          'this journal slot is held by another process (a worker of an earlier service still draining?); waiting for it',
        ),
      onSkip: (other, holder) => log.warn({ slot: other, holder }, 'leaving the journal files of a slot that no longer exists: another process holds it'),
    });
  } catch (err) {
    if (err instanceof JournalInUse) {
      log.fatal({ err }, 'journal slot in use');
      process.stderr.write(`cannot start: ${err.message}\n`);
      process.exit(EXIT.JOURNAL_IN_USE);
    }
    log.fatal({ err }, 'cannot lock the journal slot (check JOURNAL_DIR)');
    process.stderr.write(`configuration error: JOURNAL_DIR: cannot lock journal slot ${slot} in ${config.journalDir}: ${(err as Error).message}\n`);
    process.exit(EXIT.CONFIG);
  }
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
