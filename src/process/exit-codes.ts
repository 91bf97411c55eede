// Exit statuses of the service's processes, shared by the workers and the primary that reads them.
export const EXIT = {
  OK: 0,
  /** A worker crashed (uncaught exception); the primary replaces it. */
  CRASH: 1,
  /** Bad configuration, including an unknown or invalid MQ_OPT_* librdkafka property. */
  CONFIG: 2,
  /** The listen address cannot be bound. */
  LISTEN: 3,
  /** Shutdown timed out with points still not acknowledged by Kafka; `drain` gave up with Kafka unreachable (DRAIN_TIMEOUT_MS). */
  UNFLUSHED: 4,
  /** The runtime cannot run the service: no uWebSockets.js build loads on this Node and C library (http/uws.ts). */
  RUNTIME: 5,
  /** JOURNAL_DIR is held by another service, or a slot of it by another process for too long (journal/slot-lock.ts). */
  JOURNAL_IN_USE: 6,
  /**
   * DELIVERY=exactly-once: another process took a slot's transactional.id (the same INSTANCE_ID
   * elsewhere): this instance can make nothing visible any more, and stops rather than fence it back.
   */
  FENCED: 7,
  /** `drain`: every readable record produced, but damaged records were found, which nothing can produce (process/drain.ts). */
  JOURNAL_DAMAGED: 8,
} as const;

/** A worker that exits with one of these before it listens stops the whole service. */
export const STARTUP_FAILURES: ReadonlySet<number> = new Set([EXIT.CONFIG, EXIT.LISTEN, EXIT.RUNTIME, EXIT.JOURNAL_IN_USE]);
