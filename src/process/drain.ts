// `drain`: produces every record a journal directory holds to MQ_TOPIC, then exits. No HTTP. For a
// journal whose service will not start on it again soon: a pod removed by a scale-down, a dead node's
// disk, a directory moved to another host (docs/operations.md, "A journal left behind").
//
//   locks:   service.lock, then every slot that has files, whatever WORKERS wrote them, without
//            waiting: a directory in use exits 6 (JOURNAL_IN_USE) naming the holder, nothing touched
//   produce: the journal opened on every slot and the write-ahead path started as a worker's is: at
//            least once, what the journal holds produced again (replay.ts); exactly once, under the
//            transactional ids of the instance that wrote it, from its committed positions
//            (slot-transactions.ts), so nothing committed is produced twice; a progress line a second
//   end:     nothing left: exit 0. Kafka acknowledged nothing for DRAIN_TIMEOUT_MS (unreachable):
//            exit 4, the files kept for the next drain. Damaged records (counted, every other one
//            produced): exit 8. A summary line either way.
import { hostname } from 'node:os';
import { transactionalId, type Config } from '../config.js';
import { diskFiles } from '../journal/files.js';
import { Journal, JournalError } from '../journal/journal.js';
import { journalIdentity, recordedInstance } from '../journal/journal-id.js';
import { claimEverySlot, JournalInUse, lockJournalDir, type SlotClaim } from '../journal/slot-lock.js';
import { KafkaProducer } from '../kafka/producer.js';
import { producerSettings } from '../kafka/settings.js';
import { createLogger, type Logger } from '../log.js';
import { createWorkerMetrics } from '../metrics/metrics.js';
import { sinkOfMode } from '../write-ahead/delivery-mode.js';
import { EXIT } from './exit-codes.js';
import { startTransactions } from './slot-transactions.js';

const PROGRESS_INTERVAL_MS = 1_000;
/** What is left of the producer's flush and disconnect once the journal is emptied, or drain gives up. */
const STOP_MS = 5_000;
/**
 * One connection attempt at most (the service's take 10 s): the exit waits for the attempt under way
 * (librdkafka's client is destroyed whole), so that a drain that gives up exits this soon after.
 */
const CONNECT_TIMEOUT_MS = 2_000;

export async function runDrain(config: Readonly<Config>): Promise<never> {
  const dir = config.journalDir;
  const log = createLogger(config.logLevel, { drain: dir }, 'stderr');
  const say = (line: string) => process.stderr.write(`drain: ${line}\n`);
  const stop: (code: number, line: string) => never = (code, line) => {
    process.stdout.write(`drain: ${line}\n`);
    process.exit(code);
  };

  if (!isDirectory(dir)) stop(EXIT.CONFIG, `JOURNAL_DIR=${dir} is not a directory: nothing to drain there`);
  const claim = claimDirectory(dir, stop);
  if (claim.slots.size === 0) stop(EXIT.OK, `0 points produced, 0 damaged records, nothing left: JOURNAL_DIR=${dir} holds no journal files`);
  config = withRecordedInstance(config, dir, log);
  const exactlyOnce = config.exactlyOnce;

  let journal: Journal;
  try {
    journal = new Journal({
      dir,
      claim,
      maxBytes: config.journalMaxBytes,
      sync: config.journalSync,
      onDamage: (file, at, records, what) => say(`${records} damaged record(s) in ${file} at byte ${at} (${what}): counted, the records after them read on`),
    });
  } catch (err) {
    stop(EXIT.CONFIG, `cannot open the journal in JOURNAL_DIR=${dir}: ${err instanceof JournalError ? err.message : String(err)}`);
  }
  const metrics = createWorkerMetrics('drain');
  const journalId = exactlyOnce === null ? null : journalIdentity(diskFiles, dir);
  const settings = producerSettings(config, `track-ingest-drain-${hostname()}`, exactlyOnce === null ? null : transactionalId(exactlyOnce, claim.slot));
  // An object's fields: a plain variable set in the callback would be narrowed to null by TypeScript.
  const producerFailure: { why: string | null; fenced: boolean } = { why: null, fenced: false };
  const { sink: path, exactlyOnce: transactional } = sinkOfMode(
    {
      config,
      log,
      metrics,
      journal,
      producer: (events) => new KafkaProducer(config, log, metrics, settings, events, CONNECT_TIMEOUT_MS),
      events: {
        onFatal: (fenced) => {
          producerFailure.why = fenced
            ? "fenced: another process took a slot's transactional.id (the service started on this journal elsewhere?)"
            : 'the Kafka producer failed fatally';
          producerFailure.fenced = fenced;
        },
      },
    },
    journalId,
  );
  path.start();

  // Given up once Kafka has acknowledged nothing for DRAIN_TIMEOUT_MS: from the start, then from the last point it took.
  const startedAt = Date.now();
  let progressAt = startedAt;
  let done = 0;
  const givenUp = () => Date.now() - progressAt > config.drainTimeoutMs;
  if (transactional !== null) await startTransactions(config, transactional, claim, log, await path.whenAccepting(config.drainTimeoutMs), givenUp);
  // A progress line a second until the journal is emptied, or it cannot be (whenEmptied returns at once then).
  let lastLine = startedAt;
  while (!givenUp() && producerFailure.why === null && journal.failure === null) {
    if (await path.whenEmptied(Math.min(Date.now() + PROGRESS_INTERVAL_MS, progressAt + config.drainTimeoutMs + 1))) break;
    const now = Date.now();
    const points = journal.donePoints - done;
    if (points > 0) progressAt = now;
    done = journal.donePoints;
    say(`${path.pointsLeft} points in ${journal.records} records left; ${Math.round((points * 1000) / Math.max(1, now - lastLine))} points/s`);
    lastLine = now;
  }
  const emptied = path.emptied;
  await path.drain(emptied ? STOP_MS : 1_000);
  journal.close();
  claim.release();

  const skipped = transactional?.alreadyCommittedPoints ?? 0;
  const seconds = (Date.now() - startedAt) / 1000;
  const produced = journal.donePoints - skipped;
  const summary =
    `${produced} points produced in ${seconds.toFixed(1)} s (${Math.round(produced / Math.max(seconds, 0.001))} points/s)` +
    (exactlyOnce === null ? '' : `, ${skipped} already committed before (not produced again)`) +
    `, ${journal.damagedRecords} damaged records`;
  if (journal.failure !== null) stop(EXIT.CRASH, `${summary}; stopped: ${journal.failure.message}; the files are kept for another drain`);
  if (producerFailure.why !== null) stop(producerFailure.fenced ? EXIT.FENCED : EXIT.CRASH, `${summary}; stopped: ${producerFailure.why}; the files are kept`);
  if (!emptied) {
    stop(
      EXIT.UNFLUSHED,
      `${summary}; ${path.pointsLeft} points in ${journal.records} records left: Kafka (${config.brokers}) acknowledged nothing for ${config.drainTimeoutMs} ms (DRAIN_TIMEOUT_MS); the files are kept: run drain again once it is reachable`,
    );
  }
  if (journal.damagedRecords > 0) {
    stop(
      EXIT.JOURNAL_DAMAGED,
      `${summary}; nothing else left: every readable record is in Kafka, the ${journal.damagedRecords} damaged ones could not be read (docs/reliability.md)`,
    );
  }
  return stop(EXIT.OK, `${summary}; nothing left: JOURNAL_DIR=${dir} holds nothing Kafka has not acknowledged`);
}

/** The directory's locks: the service's, then every slot's; a directory in use stops here. */
function claimDirectory(dir: string, stop: (code: number, line: string) => never): SlotClaim {
  try {
    lockJournalDir(diskFiles, dir);
    return claimEverySlot(diskFiles, dir);
  } catch (err) {
    if (err instanceof JournalInUse)
      return stop(EXIT.JOURNAL_IN_USE, `${err.message}: a service runs on this journal (it produces what it holds itself); nothing was touched`);
    return stop(EXIT.CONFIG, `cannot lock JOURNAL_DIR=${dir}: ${(err as Error).message}`);
  }
}

/**
 * DELIVERY=exactly-once: the configuration with the instance the directory recorded (journal-id.ts):
 * a Job's pod has another name than the pod that wrote the journal, and its slots' transactional ids
 * are what the committed positions are found under.
 */
function withRecordedInstance(config: Config, dir: string, log: Logger): Config {
  const recorded = recordedInstance(diskFiles, dir);
  if (config.exactlyOnce === null) {
    if (recorded !== null)
      log.warn(
        { instance: recorded },
        'this journal was written with DELIVERY=exactly-once; drained at least once, what a committed transaction already covered is produced again (DELIVERY=exactly-once avoids that)',
      );
    return config;
  }
  if (recorded === null || recorded === config.exactlyOnce.instance) return config;
  log.info({ instance: recorded }, 'producing under the transactional ids of the instance that wrote this journal');
  return { ...config, exactlyOnce: { ...config.exactlyOnce, instance: recorded } };
}

function isDirectory(dir: string): boolean {
  try {
    return diskFiles.list(dir) !== null;
  } catch {
    return false;
  }
}
