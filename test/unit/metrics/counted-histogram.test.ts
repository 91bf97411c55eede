// CountedHistogram must read, to Prometheus and to the primary's aggregation, exactly as the
// prom-client Histogram it replaces would have after the same observations.
import fc from 'fast-check';
import client from 'prom-client';
import { describe, expect, it } from 'vitest';
import { CountedHistogram } from '../../../src/metrics/counted-histogram.js';

const BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

// Durations as the service observes them, values exactly on a bound (which `le` counts in that
// bucket), zero, negatives, and values beyond the last bound.
const value = fc.oneof(
  fc.double({ min: 0, max: 2, noNaN: true }),
  fc.constantFrom(...BUCKETS, 0, -0, -1, 5e-324, 1.0000000000000002, 1e9),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
);

/** The same observations into ours and into prom-client's, each in a registry of its own. */
function both(values: number[]) {
  const ours = new client.Registry();
  const theirs = new client.Registry();
  const counted = new CountedHistogram('x_seconds', 'help text', BUCKETS, [ours]);
  const reference = new client.Histogram({ name: 'x_seconds', help: 'help text', buckets: BUCKETS, registers: [theirs] });
  for (const v of values) {
    counted.observe(v);
    reference.observe(v);
  }
  return { ours, theirs, counted };
}

describe('CountedHistogram', () => {
  it('writes the exposition text prom-client writes, for any finite values', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(value, { maxLength: 200 }), async (values) => {
        const { ours, theirs } = both(values);
        expect(await ours.metrics()).toBe(await theirs.metrics());
      }),
      { numRuns: 500 },
    );
  });

  it("aggregates over workers as prom-client does (the primary merges the workers' JSON)", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(value, { maxLength: 100 }), fc.array(value, { maxLength: 100 }), async (a, b) => {
        const w1 = both(a);
        const w2 = both(b);
        const merged = (registries: client.Registry[]) =>
          Promise.all(registries.map((r) => r.getMetricsAsJSON())).then((json) => client.AggregatorRegistry.aggregate(json).metrics());
        expect(await merged([w1.ours, w2.ours])).toBe(await merged([w1.theirs, w2.theirs]));
      }),
      { numRuns: 200 },
    );
  });

  it("counts a value on a bound in that bound's bucket, and starts again at reset", async () => {
    const { ours, counted } = both([0.001, 0.001, 0.0010000000000000002, 2]);
    const text = await ours.metrics();
    expect(text).toContain('x_seconds_bucket{le="0.0005"} 0\n');
    expect(text).toContain('x_seconds_bucket{le="0.001"} 2\n');
    expect(text).toContain('x_seconds_bucket{le="0.0025"} 3\n');
    expect(text).toContain('x_seconds_bucket{le="+Inf"} 4\n');
    expect(text).toContain('x_seconds_count 4\n');
    ours.resetMetrics();
    expect(await ours.metrics()).toContain('x_seconds_bucket{le="+Inf"} 0\n');
    counted.observe(0.3);
    expect(await ours.metrics()).toContain('x_seconds_sum 0.3\n');
  });

  it('refuses what prom-client refuses: a value that is not a finite number, buckets out of order', () => {
    const { counted } = both([]);
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      expect(() => counted.observe(bad)).toThrow(/x_seconds: not a finite number/);
    }
    expect(() => new CountedHistogram('y', 'h', [1, 0.5], [])).toThrow(/buckets must be finite and ascending/);
    expect(() => new CountedHistogram('y', 'h', [1, 1], [])).toThrow(/ascending/);
    expect(() => new CountedHistogram('y', 'h', [1, Number.POSITIVE_INFINITY], [])).toThrow(/finite/);
  });
});
