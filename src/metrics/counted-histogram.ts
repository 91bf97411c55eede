// A label-less Prometheus histogram that counts into an array on the hot path and hands prom-client
// its values when Prometheus scrapes, as TrackTally does for counters (metrics.ts).
//
// Why not prom-client's Histogram: every observe() makes a closure, checks the labels, and finds the
// bucket by a double-valued property key (number to string, hasOwnProperty through V8's runtime).
// POST /track observes two on every request, and that work was a visible share of a worker's
// JavaScript thread.
//
// What Prometheus and the primary's AggregatorRegistry read is prom-client's own shape (`get()`:
// cumulative `_bucket` values by `le`, then `_sum` and `_count`; aggregator `sum`), so the exposition
// is the same text; test/unit/counted-histogram.test.ts holds it to prom-client's Histogram.
import client from 'prom-client';

interface HistogramValue {
  metricName: string;
  labels: { le?: number | '+Inf' };
  value: number;
}

/** What prom-client's Histogram#get() gives (its typings say `type: MetricType`, an enum its JavaScript lacks). */
interface HistogramJson {
  name: string;
  help: string;
  type: 'histogram';
  values: HistogramValue[];
  aggregator: client.Aggregator;
}

export class CountedHistogram {
  readonly type = 'histogram';
  readonly aggregator: client.Aggregator = 'sum';
  private readonly bounds: Float64Array;
  /** Observations per bucket (not cumulative); the last slot is +Inf. */
  private readonly counts: Float64Array;
  private sum = 0;

  constructor(
    readonly name: string,
    readonly help: string,
    buckets: readonly number[],
    registers: readonly client.Registry[],
  ) {
    buckets.forEach((bound, i) => {
      if (!Number.isFinite(bound) || (i > 0 && bound <= buckets[i - 1]!)) {
        throw new Error(`histogram ${name}: buckets must be finite and ascending, got [${buckets.join(', ')}]`);
      }
    });
    this.bounds = Float64Array.from(buckets);
    this.counts = new Float64Array(buckets.length + 1);
    // prom-client's types name only its own classes; its registry takes any object with a name and
    // get(), and its AggregatorRegistry registers such objects itself (lib/cluster.js).
    for (const registry of registers) registry.registerMetric(this as unknown as client.Metric);
  }

  observe(value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`histogram ${this.name}: not a finite number: ${value}`);
    // A bucket holds the values up to and including its bound, as Prometheus' `le` says.
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    this.counts[i]!++;
    this.sum += value;
  }

  get(): Promise<HistogramJson> {
    const values: HistogramValue[] = [];
    let cumulative = 0;
    this.bounds.forEach((bound, i) => {
      cumulative += this.counts[i]!;
      values.push({ metricName: `${this.name}_bucket`, labels: { le: bound }, value: cumulative });
    });
    const count = cumulative + this.counts[this.bounds.length]!;
    values.push(
      { metricName: `${this.name}_bucket`, labels: { le: '+Inf' }, value: count },
      { metricName: `${this.name}_sum`, labels: {}, value: this.sum },
      { metricName: `${this.name}_count`, labels: {}, value: count },
    );
    return Promise.resolve({ name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator });
  }

  /** Registry#resetMetrics calls this. */
  reset(): void {
    this.counts.fill(0);
    this.sum = 0;
  }
}
