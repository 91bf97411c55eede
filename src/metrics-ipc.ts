// GET /metrics lands on one worker, but must cover all of them. The worker asks the primary over the
// cluster IPC channel; the primary gathers every worker's registry with prom-client's
// AggregatorRegistry, adds its own metrics, and answers.
//
//   worker ──ingest:metrics?──▶ primary ──prom-client:getMetricsReq──▶ every worker
//   worker ◀──ingest:metrics!── primary ◀──────── registries as JSON ──┘
import cluster from 'node:cluster';
import client, { type Registry } from 'prom-client';

const REQUEST = 'ingest:metrics?';
const RESPONSE = 'ingest:metrics!';
const TIMEOUT_MS = 5_000;

interface MetricsRequest { type: typeof REQUEST; id: number }
interface MetricsResponse { type: typeof RESPONSE; id: number; text?: string; error?: string }

/** Primary side: answer workers' requests. */
export function serveClusterMetrics(primaryRegistry: Registry): void {
  const aggregator = new client.AggregatorRegistry();
  cluster.on('message', (worker, message: MetricsRequest) => {
    if (message?.type !== REQUEST) return;
    Promise.all([aggregator.clusterMetrics(), primaryRegistry.metrics()]).then(
      ([workers, primary]) => worker.send({ type: RESPONSE, id: message.id, text: workers + primary } satisfies MetricsResponse),
      (err: Error) => worker.send({ type: RESPONSE, id: message.id, error: err.message } satisfies MetricsResponse),
    );
  });
}

/** Worker side: expose this worker's registry to the primary and return a function that asks for all. */
export function clusterMetricsClient(registry: Registry): () => Promise<string> {
  client.AggregatorRegistry.setRegistries([registry]);
  new client.AggregatorRegistry(); // installs the worker's listener for the primary's requests
  let next = 0;
  const waiting = new Map<number, { resolve: (text: string) => void; reject: (err: Error) => void; timer: NodeJS.Timeout }>();
  process.on('message', (message: MetricsResponse) => {
    if (message?.type !== RESPONSE) return;
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
      process.send({ type: REQUEST, id } satisfies MetricsRequest);
    });
}
