// The benchmark report's "service p99": the quantile of what the service's request-duration
// histogram observed between two scrapes of /metrics.
import { describe, expect, it } from 'vitest';
import { histogramQuantile, seriesValue } from '../../../bench/lib/prom-text.js';

const NAME = 'ingest_http_request_duration_seconds';
const BOUNDS = ['0.001', '0.005', '0.01', '+Inf'];
const scrape = (counts: number[]) =>
  [`# TYPE ${NAME} histogram`, ...BOUNDS.map((le, i) => `${NAME}_bucket{le="${le}"} ${counts[i]}`), `${NAME}_count ${counts.at(-1)}`].join('\n');

describe('histogramQuantile', () => {
  it('takes only what was observed between the two scrapes, interpolated within its bucket', () => {
    // Before: 1,000 fast requests. Between: 90 under 1 ms, 10 between 5 and 10 ms.
    const before = scrape([1000, 1000, 1000, 1000]);
    const after = scrape([1090, 1090, 1100, 1100]);
    // Rank 99 of 100 falls in the (5, 10] ms bucket, 9 of its 10 observations in: 5 + 5 × 0.9 ms.
    expect(histogramQuantile(before, after, NAME, 0.99)).toBeCloseTo(0.0095, 6);
    // Rank 50 in the first bucket, from 0: 50 of 90.
    expect(histogramQuantile(before, after, NAME, 0.5)).toBeCloseTo((0.001 * 50) / 90, 9);
  });

  it('answers the last finite bound when the quantile lies beyond it, and null when nothing was observed', () => {
    const before = scrape([0, 0, 0, 0]);
    expect(histogramQuantile(before, scrape([50, 50, 50, 100]), NAME, 0.99)).toBe(0.01);
    expect(histogramQuantile(before, before, NAME, 0.99)).toBeNull();
    expect(histogramQuantile(before, 'ingest_other 1', NAME, 0.99)).toBeNull();
  });
});

describe('seriesValue', () => {
  it('reads the series named with its labels, not one whose name only begins the same', () => {
    const text = 'ingest_delivery_latency_estimate_seconds{quantile="0.99"} 0.012\ningest_delivery_latency_estimate_seconds{quantile="0.5"} 0.004';
    expect(seriesValue(text, 'ingest_delivery_latency_estimate_seconds{quantile="0.5"}')).toBe(0.004);
    expect(seriesValue(text, 'ingest_delivery_latency_estimate_seconds')).toBeNull();
  });
});
