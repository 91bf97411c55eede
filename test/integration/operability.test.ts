// What an SRE relies on: one scrape covers all workers, readiness follows the broker, logs stay
// quiet when errors repeat, and SASL/PLAIN and TLS work. The last test stops and restarts the local broker.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BROKERS, consumeAll } from '../../support/kafka.js';
import { metric, metricValue, point, postFresh, postTrack, startService, until, type Service } from '../helpers/service.js';
import { fileTopic } from '../helpers/topic.js';

const KAFKA_SH = fileURLToPath(new URL('../../scripts/kafka.sh', import.meta.url));
const topic = fileTopic('ops');

describe('GET /metrics with WORKERS=2', () => {
  let svc: Service;
  beforeAll(async () => {
    svc = await startService({ MQ_TOPIC: topic, WORKERS: '2' });
    await until('both workers', async () => svc.output.some((l) => l.includes('"service listening"')));
  });
  afterAll(async () => {
    expect(await svc.stop()).toBe(0);
  });

  it('counts the requests of every worker in one scrape', async () => {
    const requests = 40;
    for (let i = 0; i < requests; i++) expect((await postFresh(svc.url, [point(`m${i}`), point(`m${i}`)])).status).toBe(202);
    await until('deliveries counted', async () => {
      const text = await (await fetch(`${svc.url}/metrics`)).text();
      return metricValue(text, 'ingest_messages_delivered_total') === requests * 2;
    });
    const text = await (await fetch(`${svc.url}/metrics`)).text();
    expect(metricValue(text, 'ingest_http_requests_total{route="/track",status="202"}')).toBe(requests);
    expect(metricValue(text, 'ingest_points_accepted_total')).toBe(requests * 2);
    // Per-worker process metrics keep their worker label: two workers, two series.
    expect(text.match(/^ingest_process_resident_memory_bytes\{worker="\d+"\} \d+/gm)).toHaveLength(2);
  });

  it('exposes every metric the README and the dashboard name', async () => {
    await postTrack(svc.url, 'not json');
    await new Promise((r) => setTimeout(r, 1_500)); // one librdkafka statistics interval
    const text = await (await fetch(`${svc.url}/metrics`)).text();
    for (const name of [
      'ingest_http_requests_total',
      'ingest_http_request_duration_seconds',
      'ingest_points_accepted_total',
      'ingest_points_rejected_total',
      'ingest_request_body_bytes_total',
      'ingest_request_points',
      'ingest_producer_queue_points',
      'ingest_producer_queue_bytes',
      'ingest_requests_rejected_total',
      'ingest_requests_waiting_for_room',
      'ingest_messages_delivered_total',
      'ingest_delivery_errors_total',
      'ingest_delivery_latency_seconds',
      'ingest_delivery_latency_estimate_seconds',
      'ingest_journal_bytes',
      'ingest_journal_records',
      'ingest_journal_oldest_unacknowledged_seconds',
      'ingest_journal_replayed_points_total',
      'ingest_journal_possible_duplicates_total',
      'ingest_journal_damaged_records_total',
      'ingest_kafka_brokers_up',
      'ingest_kafka_broker_rtt_seconds',
      'ingest_kafka_inflight_requests',
      'ingest_kafka_request_retries_total',
      'ingest_kafka_batch_messages',
      'ingest_worker_restarts_total',
      'ingest_workers',
      'ingest_process_cpu_seconds_total',
    ]) {
      expect(text, name).toMatch(new RegExp(`^# TYPE ${name} (counter|gauge|histogram)$`, 'm'));
    }
    expect(metricValue(text, 'ingest_points_rejected_total{reason="invalid_json"}')).toBe(0);
    expect(metricValue(text, 'ingest_kafka_brokers_up')).toBe(2); // one broker, two workers connected to it
    expect(metricValue(text, 'ingest_http_requests_total{route="/track",status="400"}')).toBe(1);
    expect(metricValue(text, 'ingest_workers')).toBe(2);
    expect(text).not.toMatch(/container_id=/);
    // The estimate comes from librdkafka's windows; the histogram counts each accepted request once
    // Kafka acknowledged all its points (ACK_MODE=async: its journal record).
    expect(metricValue(text, 'ingest_delivery_latency_estimate_seconds{quantile="0.99"}')).toBeGreaterThan(0);
    expect(metricValue(text, 'ingest_delivery_latency_seconds_count')).toBe(metricValue(text, 'ingest_http_requests_total{route="/track",status="202"}'));
  });
});

describe('delivery latency histogram', () => {
  it('observes every acknowledged message, from produce() to its report', async () => {
    const svc = await startService({ MQ_TOPIC: topic, ACK_MODE: 'delivered' });
    try {
      const started = performance.now();
      for (let i = 0; i < 3; i++) {
        expect(
          (
            await postTrack(
              svc.url,
              Array.from({ length: 5 }, () => point(`lat${i}`)),
            )
          ).status,
        ).toBe(202);
      }
      const elapsedS = (performance.now() - started) / 1000;
      const text = await (await fetch(`${svc.url}/metrics`)).text();
      expect(metricValue(text, 'ingest_delivery_latency_seconds_count')).toBe(15);
      expect(metricValue(text, 'ingest_delivery_latency_seconds_bucket{le="10"}')).toBe(15);
      // Each message waited for librdkafka's linger (10 ms; 5 points never fill a batch of 100), and
      // no longer than its request took.
      const sum = metricValue(text, 'ingest_delivery_latency_seconds_sum');
      expect(sum).toBeGreaterThan(15 * 0.005);
      expect(sum).toBeLessThan(15 * elapsedS);
    } finally {
      expect(await svc.stop()).toBe(0);
    }
  });

  it('observes each request in ACK_MODE=async once Kafka acknowledged all its points (its journal record)', async () => {
    const svc = await startService({ MQ_TOPIC: topic });
    try {
      for (let i = 0; i < 3; i++) {
        expect(
          (
            await postTrack(
              svc.url,
              Array.from({ length: 5 }, () => point(`alat${i}`)),
            )
          ).status,
        ).toBe(202);
      }
      // The 202s came before Kafka's acknowledgements: wait for them (read every 10 ms).
      await until('3 requests acknowledged', async () => (await metric(svc.url, 'ingest_delivery_latency_seconds_count')) === 3);
      const text = await (await fetch(`${svc.url}/metrics`)).text();
      expect(metricValue(text, 'ingest_delivery_latency_seconds_bucket{le="10"}')).toBe(3);
      expect(metricValue(text, 'ingest_messages_delivered_total')).toBe(15);
    } finally {
      expect(await svc.stop()).toBe(0);
    }
  });
});

/** Starts the service with these settings, posts one point keyed `key` and finds it in the topic. */
async function expectProducesThrough(env: Record<string, string>, key: string): Promise<void> {
  const svc = await startService(env);
  try {
    expect((await postTrack(svc.url, [point(key)])).status).toBe(202);
  } finally {
    expect(await svc.stop()).toBe(0);
  }
  const got = await consumeAll(topic, { expected: 1, idleMs: 0 });
  expect(got.filter((m) => m.key === key)).toHaveLength(1);
}

/** Starts the service with settings Kafka refuses: it stays unready, answers 500 and logs `why`. */
async function expectRefusedBroker(env: Record<string, string>, key: string, why: RegExp): Promise<void> {
  const svc = await startService(env, { waitFor: 'healthy' });
  try {
    await new Promise((r) => setTimeout(r, 2_000));
    expect((await fetch(`${svc.url}/readyz`)).status).toBe(503);
    expect((await postTrack(svc.url, [point(key)])).status).toBe(500);
    expect(svc.output.join('\n')).toMatch(why);
  } finally {
    await svc.stop('SIGKILL');
  }
}

describe('SASL/PLAIN', () => {
  const sasl = (password: string) => ({
    MQ_BROKERS: '127.0.0.1:9094',
    MQ_TOPIC: topic,
    MQ_OPT_SECURITY_PROTOCOL: 'SASL_PLAINTEXT',
    MQ_OPT_SASL_MECHANISMS: 'PLAIN',
    MQ_OPT_SASL_USERNAME: 'ingest',
    MQ_OPT_SASL_PASSWORD: password,
  });

  it('produces through the SASL listener with the right credentials', async () => {
    await expectProducesThrough(sasl('ingest-secret'), 'sasl-ok');
  });

  it('stays unready and refuses points with wrong credentials, saying why in the log', async () => {
    await expectRefusedBroker(sasl('wrong'), 'sasl-bad', /authentication fail/i);
  });
});

describe("TLS with client certificates (the local broker's :9095, scripts/kafka.sh)", () => {
  const TLS_DIR = fileURLToPath(new URL('../../.run/kafka/tls/', import.meta.url));
  const tls = (caFile: string) => ({
    MQ_BROKERS: '127.0.0.1:9095',
    MQ_TOPIC: topic,
    MQ_OPT_SECURITY_PROTOCOL: 'SSL',
    MQ_OPT_SSL_CA_LOCATION: TLS_DIR + caFile,
    MQ_OPT_SSL_CERTIFICATE_LOCATION: TLS_DIR + 'client.pem',
    MQ_OPT_SSL_KEY_LOCATION: TLS_DIR + 'client.key',
  });

  it("produces over TLS when the broker's CA is configured", async () => {
    expect(existsSync(TLS_DIR + 'ca.pem'), 'restart the local broker (scripts/kafka.sh stop; scripts/kafka.sh start) to get its TLS listener').toBe(true);
    await expectProducesThrough(tls('ca.pem'), 'tls-ok');
  });

  it('refuses a broker whose certificate it cannot verify, and says so', async () => {
    // The client's own certificate as the only CA: the broker's certificate does not chain to it.
    await expectRefusedBroker(tls('client.pem'), 'tls-bad', /certificate verify failed/i);
  });
});

describe('when the broker goes away and comes back', () => {
  // Its own timeout: it stops the broker and starts it again, which takes half a minute on a busy machine.
  it('readyz turns 503 then 200, healthz stays 200, points accepted meanwhile arrive, logs stay quiet', { timeout: 150_000 }, async () => {
    expect(BROKERS, 'this test stops and restarts the local broker of scripts/kafka.sh').toBe('127.0.0.1:9092');
    // The grace counts from the broker's going silent, and `kafka.sh stop` returns only once the broker
    // has ended (a few seconds of orderly shutdown): 3 s of grace could be over by then.
    const svc = await startService({ MQ_TOPIC: topic, BROKER_DOWN_GRACE_MS: '10000' });
    try {
      execFileSync(KAFKA_SH, ['stop'], { stdio: 'ignore' });
      const downAfterMs = await until('readyz 503', async () => (await fetch(`${svc.url}/readyz`)).status === 503);
      expect((await fetch(`${svc.url}/healthz`)).status).toBe(200);

      // Within the grace period points are still accepted: they wait in the producer's queue.
      const during = await postTrack(svc.url, [point('outage-1'), point('outage-2')]);
      // A 500 here says which refusal and how long readyz took to fall (a full run of make test met it once).
      expect(during.status, `${JSON.stringify(during.json)}; readyz 503 after ${downAfterMs} ms`).toBe(202);
      // After it, the service refuses: 500 with Retry-After, never a hang.
      await until('500 after the grace period', async () => (await postTrack(svc.url, [point('refused')])).status === 500);
      const refused = await postTrack(svc.url, [point('refused')]);
      expect([refused.status, refused.headers.get('retry-after')]).toEqual([500, '1']);
      for (let i = 0; i < 50; i++) await postTrack(svc.url, [point('refused')]);

      const logsBefore = svc.output.length;
      await new Promise((r) => setTimeout(r, 3_000));
      // Repeated broker errors are folded: a handful of lines, not one per request or per retry.
      expect(svc.output.length - logsBefore).toBeLessThan(10);

      execFileSync(KAFKA_SH, ['start'], { stdio: 'ignore' });
      const upAfterMs = await until('readyz 200', async () => (await fetch(`${svc.url}/readyz`)).status === 200, 60_000);
      expect((await postTrack(svc.url, [point('after')])).status).toBe(202);
      console.log(`readyz went 503 ${downAfterMs} ms after the broker stopped, 200 ${upAfterMs} ms after it was started again`);

      const got = await consumeAll(topic, { expected: 3, timeoutMs: 30_000 });
      expect(got.filter((m) => m.key.startsWith('outage-'))).toHaveLength(2);
      expect(svc.output.join('\n')).not.toMatch(/"key":"refused"/);
    } finally {
      execFileSync(KAFKA_SH, ['start'], { stdio: 'ignore' });
      expect(await svc.stop()).toBe(0);
    }
  });
});
