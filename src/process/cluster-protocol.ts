// Everything the primary and its workers say to each other, in one place: the environment variable
// that gives a forked worker its slot, and the messages of the cluster IPC channel, typed both ways.
//
//   primary ── fork(INGEST_WORKER_SLOT=n | standby) ──▶ worker
//   worker  ── ingest:worker-listening ──▶ primary      serving: count it, forward signals
//   worker  ── ingest:standby-ready ─────▶ primary      a booted standby, ready to take a slot
//   primary ── ingest:standby-activate {slot} ──▶ standby   take the slot (and journal) of a dead worker
//   primary ── ingest:shutdown ──▶ worker               drain and exit
//   metrics: see metrics/aggregate.ts (ingest:metrics? / ingest:metrics! / ingest:collect? / ingest:collect!)
import type { Worker } from 'node:cluster';
import { METRICS_PRIMARY_TYPES, METRICS_WORKER_TYPES, type MetricsPrimaryMessage, type MetricsWorkerMessage } from '../metrics/aggregate.js';

/**
 * Set by the primary on each worker it forks, not by operators: the worker's slot 0..WORKERS-1, kept
 * when the slot's worker is replaced, so that a replacement finds its predecessor's journal.
 */
export const WORKER_SLOT_ENV = 'INGEST_WORKER_SLOT';

/** The value of WORKER_SLOT_ENV for a standby worker, which gets its slot when a worker dies. */
export const STANDBY_SLOT = 'standby';

/** The slot the primary gave this worker: null for a standby, 0 outside the cluster (tests). */
export function workerSlot(env: NodeJS.ProcessEnv = process.env): number | null {
  const value = env[WORKER_SLOT_ENV] ?? '0';
  if (value === STANDBY_SLOT) return null;
  const n = Number(value);
  return Number.isInteger(n) && n >= 0 ? n : 0;
}

export type WorkerMessage = { type: 'ingest:worker-listening' } | { type: 'ingest:standby-ready' } | MetricsWorkerMessage;

export type PrimaryMessage = { type: 'ingest:shutdown' } | { type: 'ingest:standby-activate'; slot: number } | MetricsPrimaryMessage;

const WORKER_TYPES = new Set<string>(['ingest:worker-listening', 'ingest:standby-ready', ...METRICS_WORKER_TYPES]);
const PRIMARY_TYPES = new Set<string>(['ingest:shutdown', 'ingest:standby-activate', ...METRICS_PRIMARY_TYPES]);

function typeOf(message: unknown): string | undefined {
  if (typeof message !== 'object' || message === null) return undefined;
  const type = (message as { type?: unknown }).type;
  return typeof type === 'string' ? type : undefined;
}

/** Anything can arrive on the channel (prom-client and Node use it too): only ours passes. */
export function isWorkerMessage(message: unknown): message is WorkerMessage {
  return WORKER_TYPES.has(typeOf(message) ?? '');
}

export function isPrimaryMessage(message: unknown): message is PrimaryMessage {
  const type = typeOf(message);
  if (type === 'ingest:standby-activate') return typeof (message as { slot?: unknown }).slot === 'number';
  return PRIMARY_TYPES.has(type ?? '');
}

/** Worker side; a no-op outside the cluster. */
export function sendToPrimary(message: WorkerMessage): void {
  process.send?.(message);
}

export function sendToWorker(worker: Worker, message: PrimaryMessage): void {
  worker.send(message);
}
