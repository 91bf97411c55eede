// GET /metrics lands on one worker, but must cover all of them. The worker asks the primary over the
// cluster IPC channel; the primary collects the registry of every serving worker, merges them with
// prom-client's AggregatorRegistry.aggregate, adds its own metrics, and answers.
//
//   worker ──ingest:metrics?──▶ primary ──ingest:collect?──▶ every serving worker
//   worker ◀──ingest:metrics!── primary ◀──ingest:collect!── (registry as JSON) ─┘
//
// Only workers that are serving are asked, and one that does not answer within COLLECT_TIMEOUT_MS is
// left out of that scrape: a worker being replaced (or the idle standby) never stalls /metrics.
// (prom-client's own clusterMetrics() asks every process of the cluster and fails the whole scrape
// when one of them is still starting.)
import cluster, { type Worker } from 'node:cluster';
import client, { type Registry } from 'prom-client';

/** A worker's registry as prom-client serialises it for aggregation. */
export type MetricsJson = Awaited<ReturnType<Registry['getMetricsAsJSON']>>;

/** What a worker says about metrics (process/cluster-protocol.ts lists them with every other message). */
export type MetricsWorkerMessage = { type: 'ingest:metrics?'; id: number } | { type: 'ingest:collect!'; id: number; metrics: MetricsJson };
/** What the primary says about metrics. */
export type MetricsPrimaryMessage = { type: 'ingest:metrics!'; id: number; text?: string; error?: string } | { type: 'ingest:collect?'; id: number };

export const METRICS_WORKER_TYPES = ['ingest:metrics?', 'ingest:collect!'] as const;
export const METRICS_PRIMARY_TYPES = ['ingest:metrics!', 'ingest:collect?'] as const;

/** Anything can arrive on the channel (Node and the process model use it too): only these pass. */
const isOneOf =
  <M extends { type: string }>(types: readonly string[]) =>
  (message: unknown): message is M =>
    typeof message === 'object' && message !== null && types.includes((message as { type?: unknown }).type as string);
const isMetricsWorkerMessage = isOneOf<MetricsWorkerMessage>(METRICS_WORKER_TYPES);
const isMetricsPrimaryMessage = isOneOf<MetricsPrimaryMessage>(METRICS_PRIMARY_TYPES);
const sendToPrimary = (message: MetricsWorkerMessage): void => void process.send?.(message);
const sendToWorker = (worker: Worker, message: MetricsPrimaryMessage): void => void worker.send(message);

const TIMEOUT_MS = 5_000;
const COLLECT_TIMEOUT_MS = 2_000;

/** Primary side: answer workers' requests, asking the workers `serving()` names. */
export function serveClusterMetrics(primaryRegistry: Registry, serving: () => Worker[]): void {
  let next = 0;
  const pending = new Map<number, (worker: Worker, metrics: MetricsJson) => void>();
  cluster.on('message', (worker, message: unknown) => {
    if (!isMetricsWorkerMessage(message)) return;
    if (message.type === 'ingest:collect!') {
      pending.get(message.id)?.(worker, message.metrics);
      return;
    }
    if (message.type !== 'ingest:metrics?') return;
    const id = ++next;
    const workers = serving().filter((w) => w.isConnected());
    const collected: MetricsJson[] = [];
    const done = () => {
      pending.delete(id);
      clearTimeout(timer);
      Promise.resolve()
        .then(async () =>
          client.AggregatorRegistry.aggregate(collected)
            .metrics()
            .then(async (text) => text + (await primaryRegistry.metrics())),
        )
        .then(
          (text) => sendToWorker(worker, { type: 'ingest:metrics!', id: message.id, text }),
          (err: Error) => sendToWorker(worker, { type: 'ingest:metrics!', id: message.id, error: err.message }),
        );
    };
    const asked = new Set(workers.map((w) => w.id));
    const timer = setTimeout(done, COLLECT_TIMEOUT_MS);
    pending.set(id, (from, metrics) => {
      if (!asked.delete(from.id)) return;
      collected.push(metrics);
      if (asked.size === 0) done();
    });
    if (workers.length === 0) return done();
    for (const w of workers) sendToWorker(w, { type: 'ingest:collect?', id });
  });
}

/** Worker side: answer the primary's collection with this registry; returns a function that asks for all. */
export function clusterMetricsClient(registry: Registry): () => Promise<string> {
  let next = 0;
  const waiting = new Map<number, { resolve: (text: string) => void; reject: (err: Error) => void; timer: NodeJS.Timeout }>();
  process.on('message', (message: unknown) => {
    if (!isMetricsPrimaryMessage(message)) return;
    if (message.type === 'ingest:collect?') {
      void registry.getMetricsAsJSON().then((metrics) => sendToPrimary({ type: 'ingest:collect!', id: message.id, metrics }));
      return;
    }
    if (message.type !== 'ingest:metrics!') return;
    const w = waiting.get(message.id);
    if (w === undefined) return;
    waiting.delete(message.id);
    clearTimeout(w.timer);
    if (message.text !== undefined) w.resolve(message.text);
    else w.reject(new Error(message.error ?? 'no metrics'));
  });
  return () =>
    new Promise<string>((resolve, reject) => {
      if (process.send === undefined) return void registry.metrics().then(resolve, reject); // not under cluster
      const id = ++next;
      const timer = setTimeout(() => {
        waiting.delete(id);
        reject(new Error(`the primary did not answer within ${TIMEOUT_MS} ms`));
      }, TIMEOUT_MS);
      waiting.set(id, { resolve, reject, timer });
      sendToPrimary({ type: 'ingest:metrics?', id });
    });
}
