// DELIVERY=exactly-once: a process's slot transactions started before it produces anything (a
// worker before it listens, `drain` before it reads the journal): Kafka waited for, the transactional
// ids of the other slots whose files it holds fenced, then its own initialized and the committed
// positions read (write-ahead/exactly-once.ts).
import { hostname } from 'node:os';
import { transactionalId, type Config } from '../config.js';
import type { SlotClaim } from '../journal/slot-lock.js';
import { PositionsUnavailable, readPositions } from '../kafka/positions.js';
import { fenceTransactionalId } from '../kafka/transactional-producer.js';
import { producerSettings } from '../kafka/settings.js';
import type { Logger } from '../log.js';
import type { ExactlyOnceSink } from '../write-ahead/exactly-once.js';
import { EXIT } from './exit-codes.js';

/** How long a worker waits for Kafka before it listens all the same (and between the warnings of a wait here). */
export const LISTEN_AFTER_PRODUCER_WAIT_MS = 5_000;

/**
 * DELIVERY=exactly-once, before producing: Kafka reachable (waited for), then the slot's transactions
 * initialized (earlier holders fenced) and the committed positions read. What stops the start (the
 * positions topic missing, brokers without transactions) exits with EXIT.CONFIG before a worker
 * listens, which stops the service with the message; positions not read in time exit EXIT.CRASH (a
 * worker is started again). False when the process is stopping meanwhile.
 */
export async function startTransactions(
  config: Config,
  path: ExactlyOnceSink,
  claim: SlotClaim,
  log: Logger,
  accepting: boolean,
  stopping: () => boolean,
): Promise<boolean> {
  const exactlyOnce = config.exactlyOnce!;
  while (!accepting && !stopping()) {
    log.warn({ brokers: config.brokers }, "DELIVERY=exactly-once: waiting for Kafka before initializing the slot's transactions");
    accepting = await path.whenAccepting(LISTEN_AFTER_PRODUCER_WAIT_MS);
  }
  if (stopping()) return false;
  // Slot 0 holding the files of slots that no longer exist (WORKERS shrank): their last holders fenced first.
  for (const other of claim.slots) {
    if (other === claim.slot) continue;
    try {
      await fenceTransactionalId(
        producerSettings(config, `track-ingest-fence-${hostname()}-${other}`, transactionalId(exactlyOnce, other)),
        exactlyOnce.transactionTimeoutMs,
      );
      log.info(
        { slot: other, transactionalId: transactionalId(exactlyOnce, other) },
        'fenced the transactional.id of a slot whose journal files this worker took over',
      );
    } catch (err) {
      log.fatal(
        { err, slot: other },
        'cannot fence the transactional.id of a slot whose journal files this process took over; a worker restarts and tries again, drain exits 1 and can be run again',
      );
      process.exit(EXIT.CRASH);
    }
  }
  const connection = Object.fromEntries(Object.entries(config.producerOptions).filter(([name]) => /^(security|sasl|ssl)\./.test(name)));
  try {
    await path.startTransactions([...claim.slots], (keys) =>
      readPositions({ brokers: config.brokers, topic: exactlyOnce.positionsTopic, keys, connection, timeoutMs: exactlyOnce.transactionTimeoutMs + 10_000 }),
    );
  } catch (err) {
    if (stopping()) return false;
    // Not read in time (a broker down, a leader moving): started again by the primary, the worker tries again.
    if (err instanceof PositionsUnavailable && err.transient) {
      log.error({ err }, 'DELIVERY=exactly-once: the committed positions could not be read in time; this process restarts and reads them again');
      process.stderr.write(`cannot start yet: ${err.message}\n`);
      process.exit(EXIT.CRASH);
    }
    log.fatal({ err }, 'DELIVERY=exactly-once cannot start');
    const message = err instanceof PositionsUnavailable || err instanceof Error ? err.message : String(err);
    process.stderr.write(`cannot start: ${message}\n`);
    process.exit(EXIT.CONFIG);
  }
  return !stopping();
}
