// Start-up: a bad configuration stops the service with exit 2 and a message naming the variable.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import Kafka from '@confluentinc/kafka-javascript';
import { describe, expect, it } from 'vitest';
import { freePort } from '../../support/ports.js';
import { postTrack, point, startService } from '../helpers/service.js';

/** The shared libraries a process has mapped (/proc/PID/maps), to see which malloc it runs on. */
const mapsOf = (pid: number) => readFileSync(`/proc/${pid}/maps`, 'utf8');

async function exitOf(env: Record<string, string>) {
  const svc = await startService(env, { waitFor: 'nothing' });
  const code = await Promise.race([svc.exited, new Promise<'running'>((r) => setTimeout(() => r('running'), 15_000))]);
  if (code === 'running') await svc.stop('SIGKILL');
  return { code, output: svc.output.join('\n') };
}

describe('start-up', () => {
  it.each([
    ['MAX_POINTS', 'lots'],
    ['LISTEN_ADDR', 'nonsense'],
    ['WORKERS', '0'],
    ['MQ_TOPIC', 'has space'],
  ])('exits 2 naming %s when it is %j', async (variable, value) => {
    const { code, output } = await exitOf({ [variable]: value });
    expect(code).toBe(2);
    expect(output).toContain(`configuration error: ${variable}: `);
  });

  it.each([
    ['MQ_OPT_NO_SUCH_PROPERTY', '1', 'librdkafka has no producer property no.such.property'],
    // Topic-level (message.timeout.ms) and global (linger.ms): each refused value named, whatever its scope.
    ['MQ_OPT_MESSAGE_TIMEOUT_MS', 'soon', 'librdkafka refuses message.timeout.ms=soon: Invalid value'],
    ['MQ_OPT_LINGER_MS', 'later', 'librdkafka refuses linger.ms=later: Invalid value'],
  ])('exits 2 naming %s=%s when librdkafka does not take it', async (variable, value, why) => {
    const { code, output } = await exitOf({ [variable]: value });
    expect(code).toBe(2);
    expect(output).toContain(`configuration error: ${variable}: ${why}`);
  });

  it('starts without a librdkafka configuration warning, and logs one whole when a setting is not applied as given', async () => {
    // Delivered mode sets message.timeout.ms (topic-level) itself; MQ_OPT_* give one of each scope.
    const quiet = await startService({ ACK_MODE: 'delivered', MQ_OPT_REQUEST_TIMEOUT_MS: '20000', MQ_OPT_COMPRESSION_TYPE: 'lz4', MQ_OPT_LINGER_MS: '5' });
    // librdkafka logs its configuration warnings when the client is created; they reach JavaScript
    // with the next events (statistics, every 100 ms).
    await new Promise((r) => setTimeout(r, 500));
    expect(await quiet.stop()).toBe(0);
    expect(quiet.output.filter((l) => l.includes('CONFWARN'))).toEqual([]);

    // retry.backoff.ms above retry.backoff.max.ms: librdkafka applies the maximum, and says so.
    const warned = await startService({ MQ_OPT_RETRY_BACKOFF_MS: '5000', MQ_OPT_RETRY_BACKOFF_MAX_MS: '1000' });
    await new Promise((r) => setTimeout(r, 500));
    expect(await warned.stop()).toBe(0);
    const lines = warned.output.filter((l) => l.includes('CONFWARN')).map((l) => JSON.parse(l) as { level: number; msg: string; message: string });
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 40, msg: 'librdkafka configuration warning' });
    expect(lines[0]!.message).toMatch(/retry\.backoff\.ms. with value 5000 is greater than/);
  });

  it('exits 3 when the port is taken, instead of restarting workers forever', async () => {
    const port = await freePort();
    const blocker = createServer().listen(port, '127.0.0.1');
    await new Promise((r) => blocker.once('listening', r));
    try {
      const { code, output } = await exitOf({ LISTEN_ADDR: `127.0.0.1:${port}` });
      expect(code).toBe(3);
      expect(output).toContain('cannot listen');
    } finally {
      blocker.close();
    }
  });

  it('listens on an IPv6 address given as [::1]:port', async () => {
    const port = await freePort();
    const svc = await startService({ LISTEN_ADDR: `[::1]:${port}` }, { waitFor: 'nothing' });
    try {
      let status = 0;
      for (let i = 0; i < 100 && status !== 200; i++) {
        status = await fetch(`http://[::1]:${port}/healthz`).then(
          (r) => r.status,
          () => 0,
        );
        if (status !== 200) await new Promise((r) => setTimeout(r, 100));
      }
      expect(status).toBe(200);
    } finally {
      await svc.stop();
    }
  });

  it("names its Kafka client and librdkafka (2.15.1 or newer, with zstd and lz4) in each worker's start line and in /metrics", async () => {
    const { version } = createRequire(import.meta.url)('@confluentinc/kafka-javascript/package.json') as { version: string };
    const [major = 0, minor = 0, patch = 0] = Kafka.librdkafkaVersion.split('.').map(Number);
    expect(major * 1e6 + minor * 1e3 + patch, `librdkafka ${Kafka.librdkafkaVersion}`).toBeGreaterThanOrEqual(2_015_001);
    expect(Kafka.features).toEqual(expect.arrayContaining(['zstd', 'lz4']));
    const svc = await startService({});
    try {
      const started = svc.output
        .join('\n')
        .split('\n')
        .filter((line) => line.includes('"worker started"'));
      expect(started.length, 'workers that logged their start').toBeGreaterThan(0);
      for (const line of started) expect(line).toContain(`"kafkaClient":"@confluentinc/kafka-javascript ${version}","librdkafka":"${Kafka.librdkafkaVersion}"`);
      const metrics = await fetch(`${svc.url}/metrics`).then((r) => r.text());
      expect(metrics).toContain(
        `ingest_build_info{client="@confluentinc/kafka-javascript",client_version="${version}",librdkafka="${Kafka.librdkafkaVersion}"} 1`,
      );
    } finally {
      expect(await svc.stop()).toBe(0);
    }
  });

  // scripts/test.sh installs libjemalloc2, as the Dockerfile does.
  it('runs its workers on jemalloc when it is installed (WORKER_MALLOC=auto), on the system malloc with WORKER_MALLOC=system', async () => {
    for (const [choice, expected] of [
      ['auto', true],
      ['system', false],
    ] as const) {
      const svc = await startService({ WORKER_MALLOC: choice });
      try {
        const health = (await fetch(`${svc.url}/healthz`).then((r) => r.json())) as { pid: number };
        expect(health.pid).not.toBe(svc.proc.pid);
        expect(mapsOf(health.pid).includes('libjemalloc'), `worker of WORKER_MALLOC=${choice}`).toBe(expected);
        // The primary, already running when it read the setting, keeps the system malloc.
        expect(mapsOf(svc.proc.pid!)).not.toContain('libjemalloc');
        expect(svc.output.join('\n')).toContain(`"malloc":"${expected ? 'jemalloc' : 'system'}"`);
        expect((await postTrack(svc.url, [point('MSCU-MALLOC')])).status).toBe(202);
      } finally {
        expect(await svc.stop()).toBe(0);
      }
    }
  });

  it("collects each worker's garbage on its main thread by default (WORKER_GC=single-threaded), with V8's helper threads with WORKER_GC=parallel", async () => {
    for (const [env, expected] of [
      [{}, 'single-threaded'],
      [{ WORKER_GC: 'parallel' }, 'parallel'],
    ] as const) {
      const svc = await startService(env);
      try {
        // Each worker says how it was started (the flags the supervisor forked it with).
        const started = svc.output
          .join('\n')
          .split('\n')
          .filter((line) => line.includes('"worker started"'));
        expect(started.length, 'workers that logged their start').toBeGreaterThan(0);
        for (const line of started) expect(line).toContain(`"gc":"${expected}"`);
        expect((await postTrack(svc.url, [point('MSCU-GC')])).status).toBe(202);
      } finally {
        expect(await svc.stop()).toBe(0);
      }
    }
  });
});
