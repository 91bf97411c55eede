// The deployment files must agree with the code: metric names, probe paths, ports, grace periods.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { DEFAULTS, loadConfig } from '../../src/config.js';
import { createPrimaryMetrics, createWorkerMetrics } from '../../src/metrics.js';

const read = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8');

async function metricNames(): Promise<Set<string>> {
  const names = new Set<string>();
  for (const registry of [createWorkerMetrics('t').registry, createPrimaryMetrics().registry]) {
    for (const m of await registry.getMetricsAsJSON()) {
      names.add(m.name);
      if (String(m.type) === 'histogram') for (const s of ['_bucket', '_sum', '_count']) names.add(m.name + s);
    }
  }
  return names;
}

describe('Grafana dashboard', () => {
  const dashboard = JSON.parse(read('deploy/grafana/track-ingest-dashboard.json')) as {
    panels: { title: string; targets: { expr: string }[] }[];
  };

  it('queries only metrics the service exports', async () => {
    const known = await metricNames();
    const used = new Set(dashboard.panels.flatMap((p) => p.targets.flatMap((t) => t.expr.match(/\bingest_[a-z0-9_]+/g) ?? [])));
    expect(used.size).toBeGreaterThan(15);
    for (const name of used) expect(known.has(name), name).toBe(true);
  });

  it('shows every metric of the service (default Node metrics aside)', async () => {
    const used = dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr)).join('\n');
    const own = [...(await metricNames())].filter((n) => !/^ingest_(process_|nodejs_)/.test(n) && !/_(sum|count)$/.test(n));
    for (const name of own) {
      const base = name.replace(/_bucket$/, '');
      expect(used.includes(base), base).toBe(true);
    }
  });
});

describe('Kubernetes manifests', () => {
  const deployment = parse(read('deploy/k8s/deployment.yaml'));
  const spec = deployment.spec.template.spec;
  const container = spec.containers[0];
  const env = Object.fromEntries(container.env.map((e: { name: string; value: string }) => [e.name, e.value]));

  it('gives each worker a core: CPU request = limit = WORKERS', () => {
    expect(String(container.resources.requests.cpu)).toBe(env.WORKERS);
    expect(String(container.resources.limits.cpu)).toBe(env.WORKERS);
  });

  it('probes the service on its own port and paths', () => {
    const port = loadConfig({ LISTEN_ADDR: env.LISTEN_ADDR }).listen.port;
    expect(container.ports[0].containerPort).toBe(port);
    expect(container.readinessProbe.httpGet.path).toBe('/readyz');
    expect(container.livenessProbe.httpGet.path).toBe('/healthz');
  });

  it('lets the producers flush: grace period > preStop + SHUTDOWN_TIMEOUT_MS', () => {
    const flushS = Number(env.SHUTDOWN_TIMEOUT_MS ?? DEFAULTS.SHUTDOWN_TIMEOUT_MS) / 1000;
    expect(spec.terminationGracePeriodSeconds).toBeGreaterThan(container.lifecycle.preStop.sleep.seconds + flushS);
  });

  it('runs as non-root', () => {
    expect(spec.securityContext.runAsNonRoot).toBe(true);
  });

  it('has a Service, an HPA and a PodDisruptionBudget for the same app', () => {
    const kinds = ['service.yaml', 'hpa.yaml', 'pdb.yaml'].flatMap((f) => parseAllDocuments(read(`deploy/k8s/${f}`)).map((d) => d.toJS()));
    expect(kinds.map((k) => k.kind).sort()).toEqual(['HorizontalPodAutoscaler', 'PodDisruptionBudget', 'Service']);
    const hpa = kinds.find((k) => k.kind === 'HorizontalPodAutoscaler');
    expect(hpa.spec.scaleTargetRef.name).toBe(deployment.metadata.name);
  });
});

describe('Dockerfile and compose', () => {
  const dockerfile = read('Dockerfile');

  it('builds with the tested script, runs as non-root, checks /healthz, stops with SIGTERM', () => {
    expect(dockerfile).toMatch(/^FROM node:20-bookworm-slim AS build$/m);
    expect(dockerfile).toMatch(/^RUN scripts\/image-build\.sh deps$/m);
    expect(dockerfile).toMatch(/^RUN scripts\/image-build\.sh compile$/m);
    expect(dockerfile).toMatch(/^USER node$/m);
    expect(dockerfile).toMatch(/HEALTHCHECK[\s\S]*\/healthz/);
    expect(dockerfile).toMatch(/^STOPSIGNAL SIGTERM$/m);
    expect(dockerfile).toMatch(/^CMD \["node", "dist\/src\/main\.js"\]$/m);
  });

  it('gives compose a stop grace period longer than the flush', () => {
    const compose = parse(read('docker-compose.yml'));
    expect(parseInt(compose.services.ingest.stop_grace_period, 10) * 1000).toBeGreaterThan(Number(DEFAULTS.SHUTDOWN_TIMEOUT_MS));
    expect(compose.services.kafka.image).toMatch(/^apache\/kafka:/);
  });
});
