// The run's outputs: a Markdown table and an SVG chart (throughput against p99 latency per batch
// size, one line per implementation), written beside the JSON under bench/results/.

export interface ScenarioResult {
  name: string;
  kind: 'design' | 'saturation';
  impl: 'ours' | 'baseline';
  /** 'gateway': the load went through the reference gateway (deploy/gateway) in front of the service. */
  via?: 'direct' | 'gateway';
  /** Through the gateway: CPU per request of nginx (master and workers) and of its Redis, from /proc. */
  gatewayCpuMicrosPerRequest?: { nginx: number; redis: number } | null;
  workers: number;
  pointsPerRequest: number;
  connections: number;
  seconds: number;
  targetRate: number | null;
  /** 'paced' (bench/lib/paced-load.ts), 'autocannon -R' (overallRate) or 'autocannon' (closed loop). */
  loadGenerator: string;
  requests: number;
  non2xx: number;
  errors: number;
  requestsPerSecond: number;
  pointsPerSecond: number;
  latencyMs: { p50: number; p90: number; p99: number; p999: number; max: number };
  serviceCpuSeconds: number;
  cpuMicrosPerPoint: number;
  cpuMicrosPerRequest: number;
  pointsPerCpuSecond: number;
  servicePeakRssMiB: number;
  loadGeneratorCpuPercent: number;
  accepted: number;
  delivered: number | null;
  deliveryLatencyMs: { p50: number; p99: number } | null;
  /**
   * Ours: p99 of the service's own time per POST /track in the window (its request-duration histogram,
   * interpolated within a bucket): from the request line to the answer, without the time a request
   * spent in the kernel or in the load generator before the service read it.
   */
  serviceP99Ms?: number | null;
  /**
   * The paced generator: requests that found all its connections busy and waited for one, their
   * wait counted in the latency (no coordinated omission). Many of them: the client's pool, not the
   * service's answer, set the tail.
   */
  waitedForConnection?: number | null;
}

/**
 * Accepted = 2xx responses × points. Responses still in flight when autocannon stops are not counted
 * though the service took those points, so delivered may exceed accepted by up to connections × points.
 */
const lost = (r: ScenarioResult) => (r.delivered === null ? 'n/a' : String(Math.max(0, r.accepted - r.delivered)));
const f = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

export function markdown(meta: Record<string, string>, results: ScenarioResult[]): string {
  const lines: string[] = [];
  lines.push(`# Benchmark run ${meta.date}`, '');
  for (const [k, v] of Object.entries(meta)) lines.push(`- ${k}: ${v}`);
  lines.push('');
  lines.push('## Design load (fixed rate, 10,000 points/s)', '');
  lines.push(
    '| scenario | impl | workers | via | load generator | req/s | points/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | service p99 ms | waited for a connection | non-2xx | errors | delivered / accepted | lost | delivery p50 / p99 ms | CPU µs/point | gateway CPU µs/request (nginx + Redis) |',
  );
  lines.push('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of results.filter((x) => x.kind === 'design')) {
    const l = r.latencyMs;
    const d = r.deliveryLatencyMs === null ? 'n/a' : `${f(r.deliveryLatencyMs.p50, 1)} / ${f(r.deliveryLatencyMs.p99, 1)}`;
    const ms = (v: number) => f(v, r.loadGenerator === 'autocannon' || r.loadGenerator === 'autocannon -R' ? 0 : 1);
    const g = r.gatewayCpuMicrosPerRequest;
    const gateway = g == null ? 'n/a' : `${f(g.nginx + g.redis, 1)} (${f(g.nginx, 1)} + ${f(g.redis, 1)})`;
    lines.push(
      `| ${r.name} | ${r.impl} | ${r.workers} | ${r.via ?? 'direct'} | ${r.loadGenerator} | ${f(r.requestsPerSecond)} | ${f(r.pointsPerSecond)} | ${ms(l.p50)} | ${ms(l.p90)} | ${ms(l.p99)} | ${ms(l.p999)} | ${ms(l.max)} | ${r.serviceP99Ms == null ? 'n/a' : f(r.serviceP99Ms, 1)} | ${r.waitedForConnection == null ? 'n/a' : f(r.waitedForConnection)} | ${r.non2xx} | ${r.errors} | ${r.delivered === null ? 'n/a' : f(r.delivered)} / ${f(r.accepted)} | ${lost(r)} | ${d} | ${f(r.cpuMicrosPerPoint, 2)} | ${gateway} |`,
    );
  }
  lines.push('');
  const gatewayRows = gatewayLines(results);
  if (gatewayRows.length > 0) lines.push('## Through the gateway / direct, same run', '', ...gatewayRows, '');
  lines.push('## Saturation (closed loop)', '');
  lines.push(
    '| batch | impl | workers | req/s | points/s | p50 ms | p99 ms | max ms | CPU µs/point | CPU µs/request | points per CPU-s | peak RSS MiB | load gen CPU % | non-2xx | delivered / accepted | lost |',
  );
  lines.push('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of results.filter((x) => x.kind === 'saturation')) {
    lines.push(
      `| ${r.pointsPerRequest} | ${r.impl} | ${r.workers} | ${f(r.requestsPerSecond)} | ${f(r.pointsPerSecond)} | ${r.latencyMs.p50} | ${r.latencyMs.p99} | ${r.latencyMs.max} | ${f(r.cpuMicrosPerPoint, 2)} | ${f(r.cpuMicrosPerRequest, 1)} | ${f(r.pointsPerCpuSecond)} | ${f(r.servicePeakRssMiB)} | ${f(r.loadGeneratorCpuPercent)} | ${r.non2xx} | ${r.delivered === null ? 'n/a' : f(r.delivered)} / ${f(r.accepted)} | ${lost(r)} |`,
    );
  }
  lines.push('');
  const ratios = ratioLines(results);
  if (ratios.length > 0) lines.push('## Ours / baseline, same run', '', ...ratios, '');
  return lines.join('\n');
}

function gatewayLines(results: ScenarioResult[]): string[] {
  const out: string[] = [];
  for (const via of results.filter((r) => r.via === 'gateway')) {
    const direct = results.find((r) => r.name === via.name && r.impl === via.impl && (r.via ?? 'direct') === 'direct' && r.loadGenerator === via.loadGenerator);
    if (!direct) continue;
    const g = via.gatewayCpuMicrosPerRequest;
    out.push(
      `- ${via.name}: p99 ${f(via.latencyMs.p99, 1)} ms through the gateway, ${f(direct.latencyMs.p99, 1)} ms direct (p50 ${f(via.latencyMs.p50, 1)} / ${f(direct.latencyMs.p50, 1)}); ` +
        `the gateway's CPU ${g == null ? 'n/a' : `${f(g.nginx + g.redis, 1)} µs per request (nginx ${f(g.nginx, 1)}, Redis ${f(g.redis, 1)})`}, the service's ${f(via.cpuMicrosPerRequest, 1)} µs per request behind it, ${f(direct.cpuMicrosPerRequest, 1)} direct`,
    );
  }
  return out;
}

function ratioLines(results: ScenarioResult[]): string[] {
  const out: string[] = [];
  const sat = results.filter((r) => r.kind === 'saturation');
  for (const batch of [...new Set(sat.map((r) => r.pointsPerRequest))]) {
    const base = sat.find((r) => r.impl === 'baseline' && r.pointsPerRequest === batch);
    if (!base || base.pointsPerCpuSecond === 0) continue;
    for (const ours of sat.filter((r) => r.impl === 'ours' && r.pointsPerRequest === batch)) {
      out.push(
        `- batch ${batch}, ours with ${ours.workers} worker${ours.workers === 1 ? '' : 's'}: points per CPU-second ${f(ours.pointsPerCpuSecond / base.pointsPerCpuSecond, 1)}×, points/s ${f(ours.pointsPerSecond / base.pointsPerSecond, 1)}× the baseline (one process)`,
      );
    }
  }
  return out;
}

/** Throughput (x, points/s, log scale) against p99 latency (y, ms, log scale), one polyline per series. */
export function svgChart(results: ScenarioResult[]): string {
  const sat = results.filter((r) => r.kind === 'saturation');
  const series = new Map<string, ScenarioResult[]>();
  for (const r of sat) {
    const key = r.impl === 'ours' ? `ours, ${r.workers} worker${r.workers === 1 ? '' : 's'}` : 'baseline (one process)';
    if (!series.has(key)) series.set(key, []);
    series.get(key)!.push(r);
  }
  const W = 760,
    H = 440,
    L = 70,
    R = 230,
    T = 40,
    B = 50;
  const xs = sat.map((r) => Math.max(1, r.pointsPerSecond));
  const ys = sat.map((r) => Math.max(0.5, r.latencyMs.p99));
  const [x0, x1] = [Math.floor(Math.log10(Math.min(...xs, 100))), Math.ceil(Math.log10(Math.max(...xs, 1000)))];
  const [y0, y1] = [Math.floor(Math.log10(Math.min(...ys, 1))), Math.ceil(Math.log10(Math.max(...ys, 10)))];
  const px = (v: number) => L + ((Math.log10(Math.max(1, v)) - x0) / (x1 - x0)) * (W - L - R);
  const py = (v: number) => H - B - ((Math.log10(Math.max(0.5, v)) - y0) / (y1 - y0)) * (H - T - B);
  const colors = ['#1f77b4', '#2ca02c', '#d62728', '#9467bd'];
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">`);
  parts.push(`<rect width="${W}" height="${H}" fill="white"/>`);
  parts.push(`<text x="${L}" y="22" font-size="14" font-weight="bold">Throughput vs p99 latency by batch size (closed loop)</text>`);
  for (let e = x0; e <= x1; e++) {
    const x = px(10 ** e);
    parts.push(`<line x1="${x}" y1="${T}" x2="${x}" y2="${H - B}" stroke="#eee"/><text x="${x}" y="${H - B + 16}" text-anchor="middle">${f(10 ** e)}</text>`);
  }
  for (let e = y0; e <= y1; e++) {
    const y = py(10 ** e);
    parts.push(`<line x1="${L}" y1="${y}" x2="${W - R}" y2="${y}" stroke="#eee"/><text x="${L - 6}" y="${y + 4}" text-anchor="end">${10 ** e}</text>`);
  }
  parts.push(`<text x="${(L + W - R) / 2}" y="${H - 12}" text-anchor="middle">points per second (log)</text>`);
  parts.push(`<text x="16" y="${(T + H - B) / 2}" transform="rotate(-90 16 ${(T + H - B) / 2})" text-anchor="middle">p99 latency, ms (log)</text>`);
  [...series.entries()].forEach(([name, rs], i) => {
    const c = colors[i % colors.length];
    const sorted = [...rs].sort((a, b) => a.pointsPerRequest - b.pointsPerRequest);
    parts.push(
      `<polyline fill="none" stroke="${c}" stroke-width="2" points="${sorted.map((r) => `${px(r.pointsPerSecond)},${py(r.latencyMs.p99)}`).join(' ')}"/>`,
    );
    for (const r of sorted) {
      parts.push(
        `<circle cx="${px(r.pointsPerSecond)}" cy="${py(r.latencyMs.p99)}" r="4" fill="${c}"/><text x="${px(r.pointsPerSecond) + 6}" y="${py(r.latencyMs.p99) - 6}" fill="${c}">${r.pointsPerRequest}</text>`,
      );
    }
    parts.push(`<rect x="${W - R + 15}" y="${T + i * 22}" width="12" height="12" fill="${c}"/><text x="${W - R + 32}" y="${T + i * 22 + 10}">${name}</text>`);
  });
  parts.push(`<text x="${W - R + 15}" y="${T + series.size * 22 + 16}" fill="#555">labels: points per request</text>`);
  parts.push('</svg>');
  return parts.join('\n');
}
