// The deployment files must agree with the code: metric names, probe paths, ports, grace periods.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { JEMALLOC_PATHS } from '../../src/host-resources.js';
import { DEFAULTS, loadConfig } from '../../src/config.js';
import { EARLIEST_IDLE_CLOSE_S } from '../../src/http/uws.js';
import { createPrimaryMetrics, createWorkerMetrics } from '../../src/metrics/metrics.js';

const read = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8');

async function metricNames(): Promise<Set<string>> {
  const names = new Set<string>();
  const worker = createWorkerMetrics('t');
  // The gauges a worker's sink and its waiting room make with what they read (metrics.ts, scrape*).
  worker.scrapeQueue(() => ({ points: 0, bytes: 0 }));
  worker.scrapeWaiting(() => 0);
  worker.scrapeJournal(() => ({ bytes: 0, records: 0, oldestMs: null, damaged: 0, retried: 0, recovered: 0, possibleDuplicates: 0 }));
  for (const registry of [worker.registry, createPrimaryMetrics().registry]) {
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

describe('the metrics table of docs/operations.md', () => {
  const doc = read('docs/operations.md');
  // Every `ingest_...` name in the first column of its rows; {a,b} spelled out.
  const listed = new Set(
    doc
      .split('\n')
      .filter((l) => l.startsWith('| `ingest_'))
      .flatMap((l) => l.split(' | ')[0]!.match(/ingest_[a-z0-9_{},]+/g) ?? [])
      .flatMap((name) => {
        const m = /^(.*)\{([a-z0-9,]+)\}(.*)$/.exec(name);
        return m === null ? [name] : m[2]!.split(',').map((part) => `${m[1]}${part}${m[3]}`);
      }),
  );

  it('lists every metric the service exports (prom-client defaults aside), and no other', async () => {
    const own = [...(await metricNames())].filter(
      (n) => !/^ingest_process_|^ingest_nodejs_(?!eventloop_lag_(min|max|mean|stddev|p50|p90|p99)_)/.test(n) && !/_(sum|count|bucket)$/.test(n),
    );
    for (const name of own) expect(listed.has(name), name).toBe(true);
    const known = await metricNames();
    for (const name of listed) if (!name.endsWith('_')) expect(known.has(name), name).toBe(true);
  });
});

describe('Kubernetes manifests', () => {
  const deployment = parse(read('deploy/k8s/statefulset.yaml'));
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

  it('lets a pod removed empty its journal: grace period > preStop + SHUTDOWN_TIMEOUT_MS (the journal wait and the flush), which leaves the wait most of a minute at least', () => {
    const shutdownS = Number(env.SHUTDOWN_TIMEOUT_MS ?? DEFAULTS.SHUTDOWN_TIMEOUT_MS) / 1000;
    expect(spec.terminationGracePeriodSeconds).toBeGreaterThan(container.lifecycle.preStop.sleep.seconds + shutdownS);
    expect(shutdownS).toBeGreaterThanOrEqual(60);
  });

  it("drains a retained journal volume with a Job that runs the image's drain on the StatefulSet's claim, at its JOURNAL_DIR, as its user", () => {
    const job = parse(read('deploy/k8s/drain-job.yaml'));
    expect(job.kind).toBe('Job');
    const pod = job.spec.template.spec;
    const drain = pod.containers[0];
    expect(drain.image).toBe(container.image);
    expect(drain.command, "the image's entry, not another").toBeUndefined();
    expect(drain.args).toEqual(['drain']);
    expect(pod.restartPolicy).toBe('Never');
    const jobEnv = Object.fromEntries(drain.env.map((e: { name: string; value: string }) => [e.name, e.value]));
    for (const name of ['MQ_BROKERS', 'MQ_TOPIC', 'JOURNAL_DIR']) expect(jobEnv[name], name).toBe(env[name]);
    expect(() => loadConfig(jobEnv)).not.toThrow();
    const mount = drain.volumeMounts.find((m: { mountPath: string }) => m.mountPath === jobEnv.JOURNAL_DIR);
    const volume = pod.volumes.find((v: { name: string }) => v.name === mount.name);
    // <claim template>-<StatefulSet>-<ordinal>: the name Kubernetes gives each pod's claim.
    const template = deployment.spec.volumeClaimTemplates[0].metadata.name;
    expect(volume.persistentVolumeClaim.claimName).toMatch(new RegExp(`^${template}-${deployment.metadata.name}-\\d+$`));
    expect(pod.securityContext.runAsUser).toBe(spec.securityContext.runAsUser);
    expect(pod.securityContext.fsGroup).toBe(spec.securityContext.fsGroup);
  });

  it("keeps each pod's journal on a volume of its own, as large as JOURNAL_MAX_BYTES for every worker, and writable by it", () => {
    expect(deployment.kind).toBe('StatefulSet');
    const mount = container.volumeMounts.find((m: { mountPath: string }) => m.mountPath === env.JOURNAL_DIR);
    expect(mount, 'JOURNAL_DIR is a mounted volume').toBeDefined();
    const claim = deployment.spec.volumeClaimTemplates.find((c: { metadata: { name: string } }) => c.metadata.name === mount.name);
    expect(claim, 'the volume is a claim per pod').toBeDefined();
    const gib = Number(/^(\d+)Gi$/.exec(claim.spec.resources.requests.storage)?.[1]);
    expect(gib * 2 ** 30).toBeGreaterThanOrEqual(Number(env.JOURNAL_MAX_BYTES ?? DEFAULTS.JOURNAL_MAX_BYTES) * Number(env.WORKERS));
    expect(spec.securityContext.fsGroup).toBe(spec.securityContext.runAsUser);
  });

  it('alerts on a journal not produced, by a metric the service exports, and on journal claims no pod holds', async () => {
    const rules = parse(read('deploy/k8s/alerts.yaml')).spec.groups.flatMap((g: { rules: { alert: string; expr: string }[] }) => g.rules);
    const known = await metricNames();
    for (const name of rules.flatMap((r: { expr: string }) => r.expr.match(/\bingest_[a-z0-9_]+/g) ?? [])) expect(known.has(name), name).toBe(true);
    const unproduced = rules.find((r: { alert: string }) => r.alert === 'TrackIngestJournalNotProduced');
    expect(unproduced.expr).toContain('ingest_journal_oldest_unacknowledged_seconds');
    const orphaned = rules.find((r: { alert: string }) => r.alert === 'TrackIngestJournalWithoutPod');
    const template = deployment.spec.volumeClaimTemplates[0].metadata.name;
    expect(orphaned.expr).toContain(`${template}-${deployment.metadata.name}-[0-9]+`);
    expect(orphaned.expr).toContain(`statefulset="${deployment.metadata.name}"`);
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
    expect(dockerfile).toMatch(/^FROM node:24-trixie-slim AS build$/m);
    expect(dockerfile).toMatch(/^FROM node:24-trixie-slim$/m);
    expect(dockerfile).toMatch(/^RUN scripts\/image-build\.sh deps$/m);
    expect(dockerfile).toMatch(/^RUN scripts\/image-build\.sh compile$/m);
    expect(dockerfile).toMatch(/^USER node$/m);
    expect(dockerfile).toMatch(/HEALTHCHECK[\s\S]*\/healthz/);
    expect(dockerfile).toMatch(/^STOPSIGNAL SIGTERM$/m);
    // The entry takes the subcommand as the container's arguments: `docker run IMAGE drain`.
    expect(dockerfile).toMatch(/^ENTRYPOINT \["node", "dist\/src\/main\.js"\]$/m);
    expect(dockerfile).toMatch(/^CMD \[\]$/m);
  });

  it("gives the build stage what the Kafka client's patched build needs, before it runs", () => {
    // `image-build.sh deps` runs scripts/install.sh, which runs scripts/build-kafka-client.sh: patch(1)
    // and libzstd-dev installed, the scripts and patches/ copied first.
    const build = dockerfile.slice(0, dockerfile.indexOf('RUN scripts/image-build.sh deps'));
    expect(build).toMatch(/apt-get install [^\n]*\bpatch\b/);
    expect(build).toMatch(/apt-get install [^\n]*\blibzstd-dev\b/);
    for (const script of ['install.sh', 'need-packages.sh', 'build-kafka-client.sh'])
      expect(build).toMatch(new RegExp(`^COPY [^\\n]*scripts/${script.replace('.', '\\.')}`, 'm'));
    expect(build).toMatch(/^COPY patches \.\/patches$/m);
  });

  it('installs jemalloc in the runtime stage where WORKER_MALLOC=auto looks for it', () => {
    const runtime = dockerfile.slice(dockerfile.lastIndexOf('FROM node:24-trixie-slim'));
    expect(runtime).toMatch(/apt-get install [^\n]*\blibjemalloc2\b/);
    // Debian's libjemalloc2 puts it under /usr/lib/<multiarch triplet>/, for both image architectures.
    expect(JEMALLOC_PATHS).toContain('/usr/lib/x86_64-linux-gnu/libjemalloc.so.2');
    expect(JEMALLOC_PATHS).toContain('/usr/lib/aarch64-linux-gnu/libjemalloc.so.2');
  });

  it("installs the packages scripts/image-build.sh puts in the image's root without Docker, stage by stage", () => {
    const script = read('scripts/image-build.sh');
    const list = (name: string) => (new RegExp(`^${name}=\\(([^)]*)\\)$`, 'm').exec(script)?.[1] ?? '').split(' ').sort();
    const [build, runtime] = dockerfile.split(/^FROM node:24-trixie-slim$/m);
    const apt = (stage: string) => (/apt-get install -y --no-install-recommends ([^\\\n]*)/.exec(stage)?.[1] ?? '').trim().split(' ').sort();
    expect(apt(build!)).toEqual(list('BUILD_PACKAGES'));
    expect(apt(runtime!)).toEqual(list('RUNTIME_PACKAGES'));
    expect(script).toMatch(/^NODE_MAJOR=24$/m);
    // The runtime stage copies what the root's /app keeps.
    expect([...runtime!.matchAll(/^COPY --from=build --chown=node:node \/app\/(\S+) /gm)].map((m) => m[1]).sort()).toEqual([
      'dist',
      'native',
      'node_modules',
      'package.json',
    ]);
  });

  it('gives compose a stop grace period longer than the flush', () => {
    const compose = parse(read('docker-compose.yml'));
    expect(parseInt(compose.services.ingest.stop_grace_period, 10) * 1000).toBeGreaterThan(Number(DEFAULTS.SHUTDOWN_TIMEOUT_MS));
    expect(compose.services.kafka.image).toMatch(/^apache\/kafka:/);
  });
});

describe('gateways in front of the service', () => {
  const nginx = read('deploy/gateway/nginx.conf.template');
  const haproxy = read('deploy/gateway/haproxy.cfg');
  const deliveryTimeoutS = Number(DEFAULTS.DELIVERY_TIMEOUT_MS) / 1000;
  const seconds = (text: string, directive: RegExp) => Number(directive.exec(text)?.[1] ?? NaN);

  it('nginx: HTTP/1.1 upstream, idle upstream connections closed before the service closes them, reads outlast a delivered-mode request', () => {
    const upstream = /upstream track_ingest \{([\s\S]*?)\n {2}\}/.exec(nginx)?.[1] ?? '';
    expect(seconds(upstream, /keepalive_timeout (\d+)s;/)).toBeLessThan(EARLIEST_IDLE_CLOSE_S);
    expect(upstream).toMatch(/^\s+keepalive \d+;/m);
    expect(nginx).toMatch(/proxy_http_version 1\.1;/);
    expect(nginx).toMatch(/proxy_set_header Connection "";/);
    expect(seconds(nginx, /proxy_read_timeout (\d+)s;/)).toBeGreaterThan(deliveryTimeoutS);
    // A POST is never resent to the service after a failure (it may have been taken).
    expect(nginx).not.toMatch(/proxy_next_upstream[^;]*non_idempotent/);
    expect(nginx).toMatch(/client_max_body_size \$\{MAX_BODY_BYTES\};/);
  });

  it('HAProxy: checks /readyz over HTTP/1.1 and waits longer than a delivered-mode request', () => {
    expect(haproxy).toMatch(/^\s+http-check send meth GET uri \/readyz ver HTTP\/1\.1 hdr Host \S+$/m);
    expect(seconds(haproxy, /timeout server (\d+)s/)).toBeGreaterThan(deliveryTimeoutS);
  });

  it('Ingress (ingress-nginx): the body limit is MAX_BODY_BYTES, HTTP/1.1 upstream, idle upstream connections closed first, only /track public', () => {
    const [ingress, controller] = parseAllDocuments(read('deploy/k8s/ingress.yaml')).map((d) => d.toJS());
    const a = ingress.metadata.annotations as Record<string, string>;
    const env = Object.fromEntries(
      parse(read('deploy/k8s/statefulset.yaml')).spec.template.spec.containers[0].env.map((e: { name: string; value: string }) => [e.name, e.value]),
    );
    const maxBody = Number(env.MAX_BODY_BYTES ?? DEFAULTS.MAX_BODY_BYTES);
    const size = /^(\d+)([km]?)$/.exec(a['nginx.ingress.kubernetes.io/proxy-body-size'] ?? '');
    expect(Number(size?.[1]) * ({ '': 1, k: 1024, m: 1024 * 1024 }[size?.[2] ?? ''] ?? NaN)).toBe(maxBody);
    expect(a['nginx.ingress.kubernetes.io/proxy-http-version']).toBe('1.1');
    expect(Number(a['nginx.ingress.kubernetes.io/proxy-read-timeout'])).toBeGreaterThan(deliveryTimeoutS);
    expect(a['nginx.ingress.kubernetes.io/proxy-next-upstream']).not.toMatch(/timeout|non_idempotent/);
    expect(Number(controller.data['upstream-keepalive-timeout'])).toBeLessThan(EARLIEST_IDLE_CLOSE_S);
    const paths = ingress.spec.rules.flatMap((r: { http: { paths: unknown[] } }) => r.http.paths);
    expect(paths).toEqual([{ path: '/track', pathType: 'Exact', backend: { service: { name: 'track-ingest', port: { name: 'http' } } } }]);
    expect(parse(read('deploy/k8s/service.yaml')).spec.ports.map((p: { name: string }) => p.name)).toContain('http');
  });

  it('compose: the gateway fronts ingest with its body limit and counts in the redis service', () => {
    const compose = parse(read('docker-compose.yml'));
    const gw = compose.services.gateway.environment as Record<string, string>;
    const ingest = compose.services.ingest.environment as Record<string, string>;
    expect(gw.UPSTREAM_ADDR).toBe(`ingest:${loadConfig({ LISTEN_ADDR: ingest.LISTEN_ADDR }).listen.port}`);
    expect(gw.REDIS_URL).toBe('redis://redis:6379');
    expect(compose.services.redis).toBeDefined();
    expect(Number(gw.MAX_BODY_BYTES)).toBe(Number(ingest.MAX_BODY_BYTES ?? DEFAULTS.MAX_BODY_BYTES));
    expect(compose.services.gateway.build.dockerfile).toBe('deploy/gateway/Dockerfile');
  });
});
