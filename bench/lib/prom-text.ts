// Reading the service's /metrics (Prometheus text format) in the benchmarks.

/** The value of one series (its name and labels as written), or null. */
export function seriesValue(text: string, series: string): number | null {
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line === undefined ? null : Number(line.slice(series.length + 1));
}

/** The cumulative buckets of histogram `name` (labelled by `le` only): upper bound → count. */
function buckets(text: string, name: string): Map<number, number> {
  const prefix = `${name}_bucket{le="`;
  const out = new Map<number, number>();
  for (const line of text.split('\n')) {
    if (!line.startsWith(prefix)) continue;
    const le = line.slice(prefix.length, line.indexOf('"', prefix.length));
    out.set(le === '+Inf' ? Infinity : Number(le), Number(line.slice(line.lastIndexOf(' ') + 1)));
  }
  return out;
}

/**
 * Quantile q of what histogram `name` observed between two scrapes, interpolated within its bucket as
 * Prometheus's histogram_quantile() does; null when nothing was observed between them. A quantile
 * past the last finite bucket is answered with that bucket's bound, a lower bound of the truth.
 */
export function histogramQuantile(before: string, after: string, name: string, q: number): number | null {
  const start = buckets(before, name);
  const end = buckets(after, name);
  const bounds = [...end.keys()].sort((a, b) => a - b);
  const counts = bounds.map((le) => end.get(le)! - (start.get(le) ?? 0));
  const total = counts.at(-1);
  if (total === undefined || total <= 0) return null;
  const rank = q * total;
  let lower = 0;
  let below = 0;
  for (let i = 0; i < bounds.length; i++) {
    const upper = bounds[i]!;
    const count = counts[i]!;
    if (count >= rank) return upper === Infinity ? lower : lower + (upper - lower) * ((rank - below) / (count - below));
    lower = upper;
    below = count;
  }
  return lower;
}
