// The image's root file system, made without Docker (scripts/image-build.sh root: Debian 13, Node 24
// from the npm registry, the Dockerfile's build steps run in it), and the service started from it the
// way the image starts it: `node dist/src/main.js` in /app, as an unprivileged user, against the real
// broker, end to end; then its `drain` on the journal the service left. The root is the one the Node 24 suite runs in (scripts/test-in-root.sh
// --prepare), so that librdkafka is compiled once for both. Minutes the first time: it runs when
// RUN_IMAGE_BUILD_TEST=1, in CI and `make test-image`.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BROKERS, consumeAll } from '../../support/kafka.js';
import { freePort } from '../../support/ports.js';
import { REPO_ROOT } from '../../support/repo-root.js';
import { point, postTrack } from '../helpers/service.js';
import { fileTopic } from '../helpers/topic.js';

const enabled = process.env.RUN_IMAGE_BUILD_TEST === '1';
const ROOT = process.env.TEST_ROOT ?? join(REPO_ROOT, '.cache', 'debian13-node24');
const topic = fileTopic('image');

describe.runIf(enabled)('the image, built without Docker (scripts/image-build.sh root)', () => {
  it('is Debian 13 with Node 24 and the runtime tree, and serves as a non-root user: a point posted is in Kafka', { timeout: 1_200_000 }, async () => {
    execFileSync(join(REPO_ROOT, 'scripts', 'test-in-root.sh'), ['--prepare'], { stdio: 'inherit' });
    const inRoot = (...cmd: string[]) =>
      execFileSync('chroot', [ROOT, ...cmd])
        .toString()
        .trim();
    expect(inRoot('cat', '/etc/debian_version')).toMatch(/^13\./);
    expect(inRoot('node', '--version')).toMatch(/^v24\./);
    const app = join(ROOT, 'app');
    expect(readdirSync(app).sort()).toEqual(['dist', 'native', 'node_modules', 'package.json']);
    expect(existsSync(join(app, 'node_modules', 'vitest'))).toBe(false); // dev dependencies pruned
    // The Kafka client in the tree is the one built from patches/ (the checksums of its addon and
    // librdkafka, written by scripts/build-kafka-client.sh), not one its own install or npm prune
    // built: this throws otherwise.
    execFileSync('sha256sum', ['--check', '--status', '.track-ingest-patches.sha256'], {
      cwd: join(app, 'node_modules/@confluentinc/kafka-javascript/build/Release'),
    });

    // The image's journal volume, owned by the service's user as the Dockerfile makes it.
    const journal = join(ROOT, 'var/lib/track-ingest/journal');
    rmSync(journal, { recursive: true, force: true });
    mkdirSync(journal, { recursive: true });
    chownSync(journal, 65534, 65534);
    const port = await freePort();
    const env = [
      `MQ_BROKERS=${BROKERS}`,
      `MQ_TOPIC=${topic}`,
      `LISTEN_ADDR=127.0.0.1:${port}`,
      'WORKERS=1',
      'JOURNAL_DIR=/var/lib/track-ingest/journal',
      'NODE_ENV=production',
    ];
    const proc = spawn(
      join(REPO_ROOT, 'scripts', 'debian-root.sh'),
      ['run', ROOT, '--', 'setpriv', '--reuid=65534', '--regid=65534', '--clear-groups', 'env', ...env, 'sh', '-c', 'cd /app && exec node dist/src/main.js'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const output: string[] = [];
    proc.stdout.on('data', (d: Buffer) => output.push(d.toString()));
    proc.stderr.on('data', (d: Buffer) => output.push(d.toString()));
    const exited = new Promise((r) => proc.once('exit', r));
    try {
      let ready = 0;
      for (let i = 0; i < 150 && ready !== 200 && proc.exitCode === null; i++) {
        ready = await fetch(`http://127.0.0.1:${port}/readyz`).then(
          (r) => r.status,
          () => 0,
        );
        if (ready !== 200) await new Promise((r) => setTimeout(r, 200));
      }
      expect(ready, output.join('')).toBe(200);
      expect((await postTrack(`http://127.0.0.1:${port}`, [point('image-1'), point('image-2')])).status).toBe(202);
      expect((await consumeAll(topic, { expected: 2 })).map((m) => m.key).sort()).toEqual(['image-1', 'image-2']);
      // The build the image runs on, as its start-up log says: uWebSockets.js v20.57 on Node 24, glibc 2.41.
      const start = output
        .join('')
        .split('\n')
        .find((l) => l.includes('"starting workers"'));
      expect(start).toMatch(/"uws":"20\.57\.0","node":"v24\.[\d.]+","glibc":"2\.41"/);
    } finally {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGTERM');
        await exited;
      }
    }
    expect(proc.exitCode).toBe(0);
    // The image's other entry (`docker run IMAGE drain`, deploy/k8s/drain-job.yaml) on the journal the
    // service left: after its orderly stop, nothing is left, and it says so.
    const drain = spawnSync(
      join(REPO_ROOT, 'scripts', 'debian-root.sh'),
      [
        'run',
        ROOT,
        '--',
        'setpriv',
        '--reuid=65534',
        '--regid=65534',
        '--clear-groups',
        'env',
        ...env,
        'sh',
        '-c',
        'cd /app && exec node dist/src/main.js drain',
      ],
      { encoding: 'utf8' },
    );
    expect(drain.status, `${drain.stdout}${drain.stderr}`).toBe(0);
    expect(drain.stdout).toMatch(/^drain: 0 points produced.*nothing left/m);
  });
});
