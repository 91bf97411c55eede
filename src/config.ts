// Every environment variable the service reads, its default and its rule, in one place.
// Parsed once at start-up; a bad value stops the process (exit 2) with a message naming the variable.
// The README's configuration table mirrors DEFAULTS and the descriptions below. What `auto` means
// for WORKERS and WORKER_MALLOC is resolved here too (host-resources.ts reads the host), so that the
// process model forks with settled values.
import { accessSync, constants } from 'node:fs';
import { hostname } from 'node:os';
import { z } from 'zod';
import { JEMALLOC_PATHS, usableCpus, workerMalloc, type MallocChoice, type WorkerMalloc } from './host-resources.js';
import { SCHEMA_FULL_NAME, type RegistryFormat } from './track-point/registry-schemas.js';

export const DEFAULTS = {
  MQ_BROKERS: 'localhost:9092',
  MQ_TOPIC: 'container.telemetry',
  LISTEN_ADDR: ':8080',
  WORKERS: 'auto',
  MAX_BODY_BYTES: '1048576',
  MAX_POINTS: '10000',
  MAX_HEADER_BYTES: '4096',
  PRODUCER_QUEUE_MAX_POINTS: '100000',
  PRODUCER_QUEUE_MAX_BYTES: '67108864',
  QUEUE_FULL_WAIT_MS: '200',
  QUEUE_FULL_WAIT_MAX_BYTES: '16777216',
  BROKER_DOWN_GRACE_MS: '5000',
  SHUTDOWN_TIMEOUT_MS: '20000',
  DRAIN_TIMEOUT_MS: '60000',
  STANDBY_WORKER: '1',
  ACK_MODE: 'async',
  DELIVERY_TIMEOUT_MS: '10000',
  JOURNAL_DIR: 'journal',
  JOURNAL_MAX_BYTES: '1073741824',
  JOURNAL_SYNC: 'process',
  JOURNAL_SYNC_INTERVAL_MS: '2',
  LOG_LEVEL: 'info',
  WORKER_MALLOC: 'auto',
  WORKER_GC: 'single-threaded',
  MQ_REFUSED_TOPIC: 'off',
  MQ_REFUSED_RATE: '50',
  MQ_REFUSED_MAX_BYTES: '65536',
  MQ_REFUSED_IDLE_MS: '30000',
  TRUST_GATEWAY_HEADERS: '0',
  DELIVERY: 'at-least-once',
  INSTANCE_ID: 'auto',
  MQ_POSITIONS_TOPIC: 'auto',
  TRANSACTION_COMMIT_INTERVAL_MS: '100',
  TRANSACTION_MAX_POINTS: '10000',
  TRANSACTION_TIMEOUT_MS: '10000',
  MQ_VALUE_FORMAT: 'json',
  SCHEMA_REGISTRY_URL: '',
  SCHEMA_REGISTRY_USER: '',
  SCHEMA_REGISTRY_PASSWORD: '',
  SCHEMA_REGISTRY_TOKEN: '',
  SCHEMA_REGISTRY_CA: '',
  SCHEMA_SUBJECT_STRATEGY: 'topic',
} as const;

export type AckMode = 'async' | 'delivered';
export type Delivery = 'at-least-once' | 'exactly-once';
export type JournalSync = 'process' | 'disk';
/** How V8 collects a worker's garbage: on its own thread alone, or with helper threads (V8's default). */
export type WorkerGc = 'single-threaded' | 'parallel';

/**
 * Variables of earlier versions that no longer do anything: set, they stop the start with what
 * replaced them, rather than being silently ignored.
 */
export const REMOVED_VARIABLES: Readonly<Record<string, string>> = {
  SPILL_DIR:
    'replaced by JOURNAL_DIR, the write-ahead journal of every accepted point (set JOURNAL_DIR to the same directory: the spill files found there are imported and replayed)',
  SPILL_MAX_BYTES: 'replaced by JOURNAL_MAX_BYTES (the write-ahead journal holds every point until Kafka acknowledged it)',
  DELIVERY_LATENCY_HISTOGRAM: "no longer needed: ingest_delivery_latency_seconds is always filled (per request, from the journal's acknowledgements)",
};

/** Prefix of the pass-through librdkafka properties: MQ_OPT_SECURITY_PROTOCOL=SASL_SSL → security.protocol. */
export const PRODUCER_OPTION_PREFIX = 'MQ_OPT_';

export interface ListenAddress {
  /** '' means every interface (the `:8080` form). */
  host: string;
  port: number;
}

export interface Config {
  brokers: string;
  topic: string;
  listen: ListenAddress;
  workers: number;
  maxBodyBytes: number;
  maxPoints: number;
  /** A request's header block, bytes at most (uWebSockets.js v20.57 answers 431 beyond it: http/uws.ts). */
  maxHeaderBytes: number;
  queueMaxPoints: number;
  queueMaxBytes: number;
  /** How long a request that finds the producer queue full may wait for room before its 500; 0: refused at once. */
  queueFullWaitMs: number;
  /** Bodies of requests waiting for room, bytes at most (per worker); beyond, refused at once. */
  queueFullWaitMaxBytes: number;
  brokerDownGraceMs: number;
  shutdownTimeoutMs: number;
  /** `drain`: how long it goes on while Kafka acknowledges nothing (unreachable) before it gives up, the files kept. */
  drainTimeoutMs: number;
  /** Keep one booted, idle worker that takes over the slot of a worker that dies. */
  standbyWorker: boolean;
  /** async: 202 once enqueued (the contract: the answer does not wait for Kafka); delivered: 202 once Kafka acknowledged every point. */
  ackMode: AckMode;
  /** delivered mode: librdkafka's message.timeout.ms, the longest a request waits for Kafka. */
  deliveryTimeoutMs: number;
  /** The write-ahead journal: its directory (one file set per worker slot), its size limit per worker, and how durable a 202 is. */
  journalDir: string;
  journalMaxBytes: number;
  journalSync: JournalSync;
  /** JOURNAL_SYNC=disk: the least time between two group commits (fdatasyncs) of a worker's journal. */
  journalSyncIntervalMs: number;
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
  /** The malloc the workers are forked with (allocator.ts says why jemalloc). */
  workerMalloc: WorkerMalloc;
  /** How V8 collects the workers' garbage (gc.ts says why single-threaded by default). */
  workerGc: WorkerGc;
  /** librdkafka properties given through MQ_OPT_*, already translated to their dotted names. */
  producerOptions: Readonly<Record<string, string>>;
  /** Where requests refused for their content are kept for operators (MQ_REFUSED_TOPIC), or null: not kept. */
  refused: RefusedTopic | null;
  /**
   * The requests come through the reference gateway: the client's address is the last one of
   * X-Forwarded-For (the address the gateway saw) and X-Api-Key-Name names the client's API key.
   * Off, both headers are ignored (a client could send them itself).
   */
  trustGatewayHeaders: boolean;
  /** DELIVERY=exactly-once: each slot produces in Kafka transactions (write-ahead/transactions.ts); null: at least once. */
  exactlyOnce: ExactlyOnce | null;
  /** MQ_VALUE_FORMAT other than json: the values in that format, their schema registered in a Schema Registry; null: JSON. */
  schemaRegistry: SchemaRegistry | null;
}

/** A Schema Registry value format and the registry that holds its schema (schema-registry/). */
export interface SchemaRegistry {
  format: RegistryFormat;
  /** The registry's base URL, Confluent's API (Apicurio: …/apis/ccompat/v7). */
  url: string;
  /** The Authorization header's value (basic or bearer), or null. */
  authorization: string | null;
  /** SCHEMA_REGISTRY_CA: a PEM file of the CAs an https registry is checked against, or null (the system's). */
  caFile: string | null;
  /** The subject the schema is registered under: `<MQ_TOPIC>-value` (topic) or the record's full name (record). */
  subject: string;
}

/** DELIVERY=exactly-once: what the transactions of every slot share. */
export interface ExactlyOnce {
  /**
   * This instance's stable name (INSTANCE_ID; auto: POD_NAME, else the host name): with the slot it
   * makes each slot's transactional.id, so a restarted instance fences its own earlier self.
   */
  instance: string;
  /** The compacted topic each slot's committed journal position is written to, in the same transaction as its points. */
  positionsTopic: string;
  /** A transaction is committed this long after its first record at most. */
  commitIntervalMs: number;
  /** ... or once it holds this many points. */
  maxPoints: number;
  /** librdkafka's transaction.timeout.ms: how long a hung worker's open transaction can hold read_committed consumers back. */
  transactionTimeoutMs: number;
}

/** The transactional.id of one slot of this instance. */
export function transactionalId(exactlyOnce: ExactlyOnce, slot: number): string {
  return `track-ingest.${exactlyOnce.instance}.${slot}`;
}

/** The refused-requests topic (refused/refused-requests.ts): a dead-letter topic for bodies that were refused. */
export interface RefusedTopic {
  topic: string;
  /** Refused requests written per second and worker at most; more are counted, not written. */
  ratePerSecond: number;
  /** A refused body is kept up to this many bytes (after gunzip); the message says when it was cut. */
  maxBytes: number;
  /** Its producer disconnects once nothing was refused for this long (an idle client still costs CPU). */
  idleMs: number;
}

export class ConfigError extends Error {
  readonly variable: string;
  constructor(variable: string, message: string) {
    super(`${variable}: ${message}`);
    this.name = 'ConfigError';
    this.variable = variable;
  }
}

const wholeNumber = (min: number, max = Number.MAX_SAFE_INTEGER) =>
  z
    .string()
    .regex(/^\d+$/, 'must be a whole number')
    .transform(Number)
    .pipe(z.number().min(min, `must be at least ${min}`).max(max, `must be at most ${max}`));

// `:8080`, `0.0.0.0:8080`, `127.0.0.1:8080`, `[::1]:8080`, `localhost:8080`.
const LISTEN_RE = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:[\]]*)):(\d{1,5})$/;
const listenAddress = z.string().transform((value, ctx): ListenAddress => {
  const m = LISTEN_RE.exec(value);
  const port = m === null ? NaN : Number(m[3]);
  if (m === null || port < 1 || port > 65535) {
    ctx.addIssue({ code: 'custom', message: 'must look like :8080, 0.0.0.0:8080, 127.0.0.1:8080 or [::1]:8080 (port 1-65535)' });
    return z.NEVER;
  }
  return { host: m[1] ?? m[2] ?? '', port };
});

const brokerList = z.string().refine((v) => v.split(',').every((b) => /^[^\s,]+:\d{1,5}$/.test(b.trim())), 'must be a comma-separated list of host:port');

const topicName = z.string().regex(/^[A-Za-z0-9._-]{1,249}$/, 'must be a Kafka topic name: 1-249 of A-Z a-z 0-9 . _ -');

const workerCount = z.string().transform((value, ctx) => {
  if (value === 'auto') return usableCpus();
  const n = /^\d+$/.test(value) ? Number(value) : NaN;
  if (!(n >= 1 && n <= 256)) {
    ctx.addIssue({ code: 'custom', message: 'must be "auto" or a whole number from 1 to 256' });
    return z.NEVER;
  }
  return n;
});

const EnvSchema = z.object({
  MQ_BROKERS: brokerList,
  MQ_TOPIC: topicName,
  LISTEN_ADDR: listenAddress,
  WORKERS: workerCount,
  MAX_BODY_BYTES: wholeNumber(64, 1024 * 1024 * 1024),
  MAX_POINTS: wholeNumber(1, 10_000_000),
  MAX_HEADER_BYTES: wholeNumber(1024, 1024 * 1024),
  PRODUCER_QUEUE_MAX_POINTS: wholeNumber(1, 10_000_000),
  PRODUCER_QUEUE_MAX_BYTES: wholeNumber(1024, 2 ** 40),
  QUEUE_FULL_WAIT_MS: wholeNumber(0, 60_000),
  QUEUE_FULL_WAIT_MAX_BYTES: wholeNumber(0, 2 ** 40),
  BROKER_DOWN_GRACE_MS: wholeNumber(0, 3_600_000),
  SHUTDOWN_TIMEOUT_MS: wholeNumber(100, 3_600_000),
  DRAIN_TIMEOUT_MS: wholeNumber(1_000, 86_400_000),
  STANDBY_WORKER: z.enum(['0', '1'], { error: 'must be 0 or 1' }).transform((v) => v === '1'),
  ACK_MODE: z.enum(['async', 'delivered']),
  DELIVERY_TIMEOUT_MS: wholeNumber(1_000, 3_600_000),
  JOURNAL_DIR: z.string().min(1),
  JOURNAL_MAX_BYTES: wholeNumber(1024 * 1024, 2 ** 50),
  JOURNAL_SYNC: z.enum(['process', 'disk'], {
    error: 'must be process (survives a crash of the process) or disk (survives a power loss: each 202 waits for fdatasync)',
  }),
  JOURNAL_SYNC_INTERVAL_MS: wholeNumber(0, 1_000),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']),
  WORKER_MALLOC: z.enum(['auto', 'jemalloc', 'system']),
  WORKER_GC: z.enum(['single-threaded', 'parallel']),
  MQ_REFUSED_TOPIC: z.union([z.literal('off'), topicName]),
  MQ_REFUSED_RATE: wholeNumber(1, 100_000),
  MQ_REFUSED_MAX_BYTES: wholeNumber(0, 100 * 1024 * 1024),
  MQ_REFUSED_IDLE_MS: wholeNumber(100, 86_400_000),
  TRUST_GATEWAY_HEADERS: z.enum(['0', '1'], { error: 'must be 0 or 1' }).transform((v) => v === '1'),
  DELIVERY: z.enum(['at-least-once', 'exactly-once']),
  INSTANCE_ID: z.string().regex(/^[A-Za-z0-9._-]{1,200}$/, 'must be auto or 1-200 of A-Z a-z 0-9 . _ -'),
  MQ_POSITIONS_TOPIC: z.union([z.literal('auto'), topicName]),
  TRANSACTION_COMMIT_INTERVAL_MS: wholeNumber(1, 60_000),
  TRANSACTION_MAX_POINTS: wholeNumber(1, 10_000_000),
  TRANSACTION_TIMEOUT_MS: wholeNumber(1_000, 900_000),
  MQ_VALUE_FORMAT: z.enum(['json', 'avro', 'protobuf', 'json-schema'], { error: 'must be json, avro, protobuf or json-schema' }),
  SCHEMA_REGISTRY_URL: z.union([z.literal(''), z.url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' })]),
  SCHEMA_REGISTRY_USER: z.string(),
  SCHEMA_REGISTRY_PASSWORD: z.string(),
  SCHEMA_REGISTRY_TOKEN: z.string(),
  SCHEMA_REGISTRY_CA: z.string(),
  SCHEMA_SUBJECT_STRATEGY: z.enum(['topic', 'record'], { error: 'must be topic (<MQ_TOPIC>-value) or record (the record name)' }),
});

/** Reads the configuration from an environment (process.env by default). Throws ConfigError. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Readonly<Config> {
  for (const [variable, why] of Object.entries(REMOVED_VARIABLES)) {
    if (env[variable] !== undefined && env[variable].trim() !== '') throw new ConfigError(variable, why);
  }
  const raw: Record<string, string> = {};
  for (const key of Object.keys(DEFAULTS) as (keyof typeof DEFAULTS)[]) {
    const v = env[key];
    // An empty value (`FOO=`) means "not set", as shells and compose files often produce it.
    raw[key] = v === undefined || v.trim() === '' ? DEFAULTS[key] : v.trim();
  }
  const parsed = EnvSchema.safeParse(raw);
  if (!parsed.success) {
    // zod reports at least one issue on failure; the first names the variable.
    const issue = parsed.error.issues[0];
    const variable = String(issue?.path[0] ?? 'environment');
    throw new ConfigError(variable, `${issue?.message ?? parsed.error.message} (got ${JSON.stringify(raw[variable])})`);
  }
  const e = parsed.data;
  const config: Config = {
    brokers: e.MQ_BROKERS,
    topic: e.MQ_TOPIC,
    listen: e.LISTEN_ADDR,
    workers: e.WORKERS,
    maxBodyBytes: e.MAX_BODY_BYTES,
    maxPoints: e.MAX_POINTS,
    maxHeaderBytes: e.MAX_HEADER_BYTES,
    queueMaxPoints: e.PRODUCER_QUEUE_MAX_POINTS,
    queueMaxBytes: e.PRODUCER_QUEUE_MAX_BYTES,
    queueFullWaitMs: e.QUEUE_FULL_WAIT_MS,
    queueFullWaitMaxBytes: e.QUEUE_FULL_WAIT_MAX_BYTES,
    brokerDownGraceMs: e.BROKER_DOWN_GRACE_MS,
    shutdownTimeoutMs: e.SHUTDOWN_TIMEOUT_MS,
    drainTimeoutMs: e.DRAIN_TIMEOUT_MS,
    standbyWorker: e.STANDBY_WORKER,
    ackMode: e.ACK_MODE,
    deliveryTimeoutMs: e.DELIVERY_TIMEOUT_MS,
    journalDir: e.JOURNAL_DIR,
    journalMaxBytes: e.JOURNAL_MAX_BYTES,
    journalSync: e.JOURNAL_SYNC,
    journalSyncIntervalMs: e.JOURNAL_SYNC_INTERVAL_MS,
    logLevel: e.LOG_LEVEL,
    workerMalloc: resolveWorkerMalloc(e.WORKER_MALLOC, env),
    workerGc: e.WORKER_GC,
    producerOptions: Object.freeze(producerOptionsFrom(env)),
    refused:
      e.MQ_REFUSED_TOPIC === 'off'
        ? null
        : Object.freeze({ topic: e.MQ_REFUSED_TOPIC, ratePerSecond: e.MQ_REFUSED_RATE, maxBytes: e.MQ_REFUSED_MAX_BYTES, idleMs: e.MQ_REFUSED_IDLE_MS }),
    trustGatewayHeaders: e.TRUST_GATEWAY_HEADERS,
    exactlyOnce:
      e.DELIVERY === 'at-least-once'
        ? null
        : Object.freeze({
            instance: e.INSTANCE_ID === 'auto' ? instanceName(env) : e.INSTANCE_ID,
            positionsTopic: e.MQ_POSITIONS_TOPIC === 'auto' ? `${e.MQ_TOPIC}.positions` : e.MQ_POSITIONS_TOPIC,
            commitIntervalMs: e.TRANSACTION_COMMIT_INTERVAL_MS,
            maxPoints: e.TRANSACTION_MAX_POINTS,
            transactionTimeoutMs: e.TRANSACTION_TIMEOUT_MS,
          }),
    schemaRegistry: e.MQ_VALUE_FORMAT === 'json' ? null : Object.freeze(schemaRegistryOf(e.MQ_VALUE_FORMAT, e)),
  };
  if (config.exactlyOnce !== null) {
    if (config.ackMode !== 'async') throw new ConfigError('DELIVERY', "exactly-once needs ACK_MODE=async: its transactions cover the journal's records");
    if (config.exactlyOnce.positionsTopic === config.topic || config.exactlyOnce.positionsTopic === config.refused?.topic) {
      throw new ConfigError('MQ_POSITIONS_TOPIC', `must be a topic of its own, not ${config.exactlyOnce.positionsTopic}`);
    }
    if (config.exactlyOnce.commitIntervalMs >= config.exactlyOnce.transactionTimeoutMs) {
      throw new ConfigError('TRANSACTION_COMMIT_INTERVAL_MS', `must be below TRANSACTION_TIMEOUT_MS (${config.exactlyOnce.transactionTimeoutMs})`);
    }
  }
  if (config.refused !== null && config.refused.topic === config.topic) {
    throw new ConfigError('MQ_REFUSED_TOPIC', `must not be MQ_TOPIC (${config.topic}): refused bodies are not track points`);
  }
  if (config.queueMaxPoints < config.maxPoints) {
    throw new ConfigError('PRODUCER_QUEUE_MAX_POINTS', `must be at least MAX_POINTS (${config.maxPoints}), or no full request could ever be accepted`);
  }
  // A journal record of the largest request: its body (or its points encoded), 16 bytes of offsets per point.
  const largestRecord = 2 * config.maxBodyBytes + 16 * config.maxPoints;
  if (config.journalMaxBytes < 2 * largestRecord) {
    throw new ConfigError(
      'JOURNAL_MAX_BYTES',
      `must be at least ${2 * largestRecord} bytes: twice the journal record of the largest request (2 × MAX_BODY_BYTES + 16 bytes per point of MAX_POINTS)`,
    );
  }
  return Object.freeze(config);
}

/** The registry settings of a registry value format: its URL is required, one kind of authentication at most. */
function schemaRegistryOf(
  format: RegistryFormat,
  e: Record<
    | 'SCHEMA_REGISTRY_URL'
    | 'SCHEMA_REGISTRY_USER'
    | 'SCHEMA_REGISTRY_PASSWORD'
    | 'SCHEMA_REGISTRY_TOKEN'
    | 'SCHEMA_REGISTRY_CA'
    | 'SCHEMA_SUBJECT_STRATEGY'
    | 'MQ_TOPIC',
    string
  >,
): SchemaRegistry {
  if (e.SCHEMA_REGISTRY_URL === '')
    throw new ConfigError(
      'SCHEMA_REGISTRY_URL',
      `required with MQ_VALUE_FORMAT=${format}: the Schema Registry's URL (Apicurio: http://host:8080/apis/ccompat/v7)`,
    );
  if (e.SCHEMA_REGISTRY_TOKEN !== '' && e.SCHEMA_REGISTRY_USER !== '')
    throw new ConfigError(
      'SCHEMA_REGISTRY_TOKEN',
      'set either SCHEMA_REGISTRY_TOKEN (bearer) or SCHEMA_REGISTRY_USER and SCHEMA_REGISTRY_PASSWORD (basic), not both',
    );
  if ((e.SCHEMA_REGISTRY_USER === '') !== (e.SCHEMA_REGISTRY_PASSWORD === ''))
    throw new ConfigError('SCHEMA_REGISTRY_PASSWORD', 'basic authentication needs both SCHEMA_REGISTRY_USER and SCHEMA_REGISTRY_PASSWORD');
  if (e.SCHEMA_REGISTRY_CA !== '') {
    try {
      accessSync(e.SCHEMA_REGISTRY_CA, constants.R_OK);
    } catch (err) {
      throw new ConfigError('SCHEMA_REGISTRY_CA', `cannot read the CA file ${e.SCHEMA_REGISTRY_CA}: ${(err as Error).message}`);
    }
  }
  const authorization =
    e.SCHEMA_REGISTRY_TOKEN !== ''
      ? `Bearer ${e.SCHEMA_REGISTRY_TOKEN}`
      : e.SCHEMA_REGISTRY_USER !== ''
        ? `Basic ${Buffer.from(`${e.SCHEMA_REGISTRY_USER}:${e.SCHEMA_REGISTRY_PASSWORD}`).toString('base64')}`
        : null;
  return {
    format,
    url: e.SCHEMA_REGISTRY_URL.replace(/\/+$/, ''),
    authorization,
    caFile: e.SCHEMA_REGISTRY_CA === '' ? null : e.SCHEMA_REGISTRY_CA,
    subject: e.SCHEMA_SUBJECT_STRATEGY === 'topic' ? `${e.MQ_TOPIC}-value` : SCHEMA_FULL_NAME,
  };
}

/** INSTANCE_ID=auto: a StatefulSet's pod name (stable across restarts), else the host name. */
function instanceName(env: NodeJS.ProcessEnv): string {
  const name = (env.POD_NAME ?? '').trim() || hostname();
  return name.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 200);
}

function resolveWorkerMalloc(choice: MallocChoice, env: NodeJS.ProcessEnv): WorkerMalloc {
  const malloc = workerMalloc(choice, env);
  if (malloc === null) {
    throw new ConfigError(
      'WORKER_MALLOC',
      `jemalloc is not installed: none of ${JEMALLOC_PATHS.join(', ')} exists (Debian: apt-get install libjemalloc2; or use auto or system)`,
    );
  }
  return malloc;
}

/**
 * The mechanical rule for librdkafka properties: strip MQ_OPT_, lower-case, `_` becomes `.`,
 * and `__` becomes a literal `_`. MQ_OPT_SASL_USERNAME → sasl.username. Unknown properties are
 * rejected by librdkafka when the producer is created, which stops start-up (exit 2).
 */
export function producerOptionsFrom(env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(env)) {
    if (!key.startsWith(PRODUCER_OPTION_PREFIX) || value === undefined) continue;
    const name = key
      .slice(PRODUCER_OPTION_PREFIX.length)
      .toLowerCase()
      .split('__')
      .map((part) => part.replace(/_/g, '.'))
      .join('_');
    out[name] = value;
  }
  return out;
}
