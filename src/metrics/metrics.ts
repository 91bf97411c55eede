// Prometheus metrics. Each worker keeps its own prom-client registry; the primary aggregates them
// (prom-client's AggregatorRegistry over the cluster IPC channel) so that one scrape of /metrics,
// whichever worker answers it, covers every worker. Label sets are bounded: routes, status codes,
// reasons, librdkafka error names and broker ids; never a container id.
import client from 'prom-client';
import { CountedHistogram } from './counted-histogram.js';
import { EVENT_LOOP_SAMPLE_MS, EventLoopDelay, type EventLoopDelaySnapshot } from './event-loop-delay.js';
import { STATUS_LINE, TRACK_REJECTIONS, type HttpStatus, type TrackRejection } from '../api/errors.js';
import type { Route } from '../api/routes.js';
import { brokerMetrics, deliveryMetrics, refusedMetrics, transactionMetrics } from './kafka-metrics.js';
import { deltas, METRIC_PREFIX, type Registrar } from './registrar.js';

const { Counter, Gauge, Registry } = client;

/** A gauge read at scrape time is made with its source; made again (a new owner), it replaces the last one. */
function freshName(registers: client.Registry[], name: string): string {
  for (const registry of registers) registry.removeSingleMetric(name);
  return name;
}

/** Every status the service answers with (label values of the request counters). */
export const STATUSES = (Object.keys(STATUS_LINE).map(Number) as HttpStatus[]).sort((a, b) => a - b);

/**
 * What the POST /track path counts, as plain numbers: incrementing a field costs nothing, while a
 * prom-client child re-hashes its label object on every call (4 % of a worker at 1 point per
 * request). The counters below read these totals when Prometheus scrapes.
 */
export class TrackTally {
  readonly byStatus = Object.fromEntries(STATUSES.map((status) => [status, 0])) as Record<HttpStatus, number>;
  points = 0;
  bytes = 0;
  /** Points in refused requests, and refused requests, by error code. */
  readonly rejected = Object.fromEntries(TRACK_REJECTIONS.map((code) => [code, 0])) as Record<TrackRejection, number>;
  readonly refused = Object.fromEntries(TRACK_REJECTIONS.map((code) => [code, 0])) as Record<TrackRejection, number>;
}

/**
 * prom-client's default metrics report its event-loop histogram's raw samples, which are the sampling
 * interval plus the delay (event-loop-delay.ts says why that misleads), and it has no switch to leave
 * them out: its histogram is given an interval of 2^30 ms (it never samples) and its gauges are
 * replaced, under the same names, by ones that report the delay alone.
 */
const PROM_CLIENT_LOOP_SAMPLE_MS = 2 ** 30;
const LOOP_DELAY_STATISTICS = ['min', 'max', 'mean', 'stddev', 'p50', 'p90', 'p99'] as const;

/** The event-loop delay gauges (ingest_nodejs_eventloop_lag_*_seconds), read from `delay` at each scrape. */
function registerLoopDelay(registry: client.Registry, workerId: string, delay: EventLoopDelay): void {
  const gauges = new Map<(typeof LOOP_DELAY_STATISTICS)[number], client.Gauge<'worker'>>();
  for (const statistic of LOOP_DELAY_STATISTICS) {
    const name = `${METRIC_PREFIX}nodejs_eventloop_lag_${statistic}_seconds`;
    registry.removeSingleMetric(name);
    gauges.set(
      statistic,
      new Gauge({
        name,
        help: `Event-loop delay beyond the ${EVENT_LOOP_SAMPLE_MS} ms sampling interval since the last scrape, ${statistic} (a timer's lateness; 0 on an idle loop).`,
        labelNames: ['worker'] as const,
        aggregator: statistic === 'max' ? 'max' : statistic === 'min' ? 'min' : 'average',
        registers: [registry],
        // The first one's collect sets them all from one window, then starts the next.
        ...(statistic === LOOP_DELAY_STATISTICS[0] ? { collect: () => set(delay.take()) } : {}),
      }),
    );
  }
  const set = (snapshot: EventLoopDelaySnapshot) => {
    for (const [statistic, gauge] of gauges) gauge.labels(workerId).set(snapshot[statistic]);
  };
}

/** What the journal reports at each scrape (write-ahead/admission.ts gathers it). */
export interface JournalFigures {
  bytes: number;
  records: number;
  /** Acceptance time of the oldest record in flight (ms since the epoch), or null. */
  oldestMs: number | null;
  /** Records found damaged when read back (each costs itself alone). */
  damaged: number;
  retried: number;
  recovered: number;
  possibleDuplicates: number;
}

export function createWorkerMetrics(workerId: string) {
  const registry = new Registry();
  client.collectDefaultMetrics({
    register: registry,
    prefix: METRIC_PREFIX,
    labels: { worker: workerId },
    eventLoopMonitoringPrecision: PROM_CLIENT_LOOP_SAMPLE_MS,
  });
  const loopDelay = new EventLoopDelay();
  registerLoopDelay(registry, workerId, loopDelay);
  const r: Registrar = { registers: [registry], delta: deltas() };
  return {
    registry,
    /** The event-loop delay, sampled once the worker serves (an idle standby does not sample). */
    loopDelay,
    ...requestMetrics(r),
    ...journalSyncMetrics(r),
    // The gauges read at scrape time are made by the owner of what they read, with it, once: the
    // sink (its queue and journal: write-ahead/admission.ts) and the edge (its waiting room).
    scrapeQueue: (source: () => { points: number; bytes: number }) => queueGauges(r, source),
    scrapeWaiting: (source: () => number) => waitingGauge(r, source),
    scrapeJournal: (source: () => JournalFigures) => journalGauges(r, source),
    ...deliveryMetrics(r),
    ...brokerMetrics(r),
    ...refusedMetrics(r),
    ...transactionMetrics(r),
    buildInfo: new Gauge({
      name: `${METRIC_PREFIX}build_info`,
      help: 'Always 1; its labels name the Kafka client and the librdkafka the workers run.',
      labelNames: ['client', 'client_version', 'librdkafka'] as const,
      aggregator: 'max',
      registers: [registry],
    }),
  };
}

/** HTTP requests: POST /track's tallies and histograms, and the other routes' answers. */
function requestMetrics({ registers, delta }: Registrar) {
  const tally = new TrackTally();
  const requests = new Counter({
    name: `${METRIC_PREFIX}http_requests_total`,
    help: 'HTTP requests answered, by route and status code.',
    labelNames: ['route', 'status'] as const,
    registers,
    collect() {
      for (const s of STATUSES) {
        const d = delta(`status${s}`, tally.byStatus[s]);
        if (d > 0) this.labels('/track', String(s)).inc(d);
      }
    },
  });
  // Label-less and counted into an array (CountedHistogram): POST /track is the route whose latency
  // matters, and it observes on every request.
  const duration = new CountedHistogram(
    `${METRIC_PREFIX}http_request_duration_seconds`,
    'POST /track: time from the request line to the response, body reading included.',
    [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
    registers,
  );
  new Counter({
    name: `${METRIC_PREFIX}points_accepted_total`,
    help: 'Track points accepted (answered 202) and handed to the producer.',
    registers,
    collect() {
      this.inc(delta('points', tally.points));
    },
  });
  new Counter({
    name: `${METRIC_PREFIX}points_rejected_total`,
    help: 'Track points in requests that were refused, by reason (0 counted when the body could not be read as an array).',
    labelNames: ['reason'] as const,
    registers,
    collect() {
      for (const [reason, total] of Object.entries(tally.rejected)) this.labels(reason).inc(delta(`rejected:${reason}`, total));
    },
  });
  new Counter({
    name: `${METRIC_PREFIX}requests_rejected_total`,
    help: 'POST /track requests answered with an error, by reason: the error code of the answer (queue_full is backpressure, broker_unavailable an outage; see the error catalogue in the README).',
    labelNames: ['reason'] as const,
    registers,
    collect() {
      for (const [reason, total] of Object.entries(tally.refused)) this.labels(reason).inc(delta(`refused:${reason}`, total));
    },
  });
  new Counter({
    name: `${METRIC_PREFIX}request_body_bytes_total`,
    help: 'Request body bytes received on POST /track, as sent on the wire (before gunzip).',
    registers,
    collect() {
      this.inc(delta('bytes', tally.bytes));
    },
  });
  const requestPoints = new CountedHistogram(
    `${METRIC_PREFIX}request_points`,
    'Track points per accepted request.',
    [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10000],
    registers,
  );
  // The other routes are rare: children bound once at start-up are plenty.
  const byStatus = (route: Route) =>
    Object.fromEntries(STATUSES.map((s) => [s, requests.labels(route, String(s))])) as Record<HttpStatus, client.Counter.Internal>;
  return {
    /** POST /track: plain tallies, and the two histograms counted into arrays. */
    track: { tally, duration, requestPoints },
    other: (route: Exclude<Route, '/track'>) => ({ requests: byStatus(route) }),
  };
}

/** librdkafka's queue, read at scrape time from `source` (the producer's own counters): the hot path never touches these gauges. */
function queueGauges({ registers }: Registrar, source: () => { points: number; bytes: number }): void {
  new Gauge({
    name: freshName(registers, `${METRIC_PREFIX}producer_queue_points`),
    help: "Messages in librdkafka's queue, not yet acknowledged by Kafka or failed (rd_kafka_outq_len: what admission counts against PRODUCER_QUEUE_MAX_POINTS).",
    registers,
    collect() {
      this.set(source().points);
    },
  });
  new Gauge({
    name: freshName(registers, `${METRIC_PREFIX}producer_queue_bytes`),
    help: "Bytes (keys and values) of the messages in librdkafka's queue, as of its last statistics (every 100 ms).",
    registers,
    collect() {
      this.set(source().bytes);
    },
  });
}

/** The requests waiting for room in the queue (http/waiting-room.ts), read at scrape time from `source`. */
function waitingGauge({ registers }: Registrar, source: () => number): void {
  new Gauge({
    name: freshName(registers, `${METRIC_PREFIX}requests_waiting_for_room`),
    help: 'POST /track requests that found the producer queue full and wait for room (QUEUE_FULL_WAIT_MS).',
    registers,
    collect() {
      this.set(source());
    },
  });
}

/** The write-ahead journal (journal/journal.ts), read at scrape time from `journalSource` (write-ahead/admission.ts gathers it). */
function journalGauges({ registers, delta }: Registrar, journalSource: () => JournalFigures): void {
  new Gauge({
    name: freshName(registers, `${METRIC_PREFIX}journal_bytes`),
    help: 'Bytes of the write-ahead journal: records of accepted points not yet all acknowledged by Kafka (JOURNAL_MAX_BYTES per worker).',
    registers,
    collect() {
      this.set(journalSource().bytes);
    },
  });
  new Gauge({
    name: freshName(registers, `${METRIC_PREFIX}journal_records`),
    help: 'Journal records (one per accepted request) produced, or to be produced again, and not yet acknowledged whole.',
    registers,
    collect() {
      this.set(journalSource().records);
    },
  });
  new Gauge({
    name: freshName(registers, `${METRIC_PREFIX}journal_oldest_unacknowledged_seconds`),
    help: 'Age of the oldest journal record Kafka has not yet acknowledged whole (0 when none); the highest over workers.',
    aggregator: 'max',
    registers,
    collect() {
      const oldest = journalSource().oldestMs;
      this.set(oldest === null ? 0 : Math.max(0, Date.now() - oldest) / 1000);
    },
  });
  new Counter({
    name: freshName(registers, `${METRIC_PREFIX}journal_replayed_points_total`),
    help: 'Points produced again from the journal, by cause: retry (their delivery failed after the 202) or restart (left by an earlier process: a crash, a restart during an outage).',
    labelNames: ['cause'] as const,
    registers,
    collect() {
      const j = journalSource();
      this.labels('retry').inc(delta('journal:retried', j.retried));
      this.labels('restart').inc(delta('journal:recovered', j.recovered));
    },
  });
  new Counter({
    name: freshName(registers, `${METRIC_PREFIX}journal_possible_duplicates_total`),
    help: 'Points produced again that Kafka may already have had: left by an earlier process without a mark of their acknowledgement, or retried after librdkafka reported them as possibly written. At least once: each may be in Kafka twice.',
    registers,
    collect() {
      this.inc(delta('journal:duplicates', journalSource().possibleDuplicates));
    },
  });
  new Counter({
    name: freshName(registers, `${METRIC_PREFIX}journal_damaged_records_total`),
    help: 'Journal records found damaged when read back (a check that does not match, a record torn or missing between two whole ones), each logged with its file and offset and skipped; the records after it are read on. Should stay 0 but after a power loss or a bad disk.',
    registers,
    collect() {
      this.inc(delta('journal:damaged', journalSource().damaged));
    },
  });
}

/** JOURNAL_SYNC=disk: what a 202 waits for on the disk (journal/group-commit.ts). */
function journalSyncMetrics({ registers }: Registrar) {
  const journalSync = new CountedHistogram(
    `${METRIC_PREFIX}journal_sync_seconds`,
    "JOURNAL_SYNC=disk: each group commit, from its start to its last fdatasync: the disk's share of the wait of a 202 (which also waits up to JOURNAL_SYNC_INTERVAL_MS for the commit to start). Empty in process mode.",
    [0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
    registers,
  );
  return { journalSync };
}

export type WorkerMetrics = ReturnType<typeof createWorkerMetrics>;

/** Metrics only the primary knows. */
export function createPrimaryMetrics() {
  const registry = new Registry();
  const workerRestarts = new Counter({
    name: `${METRIC_PREFIX}worker_restarts_total`,
    help: 'Workers the primary replaced after they exited unexpectedly.',
    registers: [registry],
  });
  const workers = new Gauge({
    name: `${METRIC_PREFIX}workers`,
    help: 'Workers currently running.',
    registers: [registry],
  });
  return { registry, workerRestarts, workers };
}
