// The Dockerfile's build steps, run without Docker (scripts/image-build.sh assemble), and the result
// started the way the image starts it: `node dist/src/main.js` as an unprivileged user.
// It compiles librdkafka (minutes), so it runs when RUN_IMAGE_BUILD_TEST=1: in CI and `make test-image`.
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { BROKERS } from '../../support/kafka.js';
import { freePort } from '../../support/ports.js';
import { point, postTrack } from '../helpers/service.js';

const SCRIPT = fileURLToPath(new URL('../../scripts/image-build.sh', import.meta.url));
const enabled = process.env.RUN_IMAGE_BUILD_TEST === '1';

describe.runIf(enabled)('scripts/image-build.sh', () => {
  it('assembles a runtime tree that serves as a non-root user', { timeout: 900_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'image-'));
    chmodSync(dir, 0o755);
    const out = join(dir, 'app');
    try {
      execFileSync(SCRIPT, ['assemble', out], { stdio: 'inherit' });
      expect(execFileSync('ls', [join(out, 'node_modules')]).toString()).not.toMatch(/^vitest$/m); // dev dependencies pruned
      // The librdkafka in the tree is the one built from patches/ (scripts/patch-node-rdkafka.sh wrote
      // its checksum), not the one node-rdkafka's install or npm prune built: this throws otherwise.
      execFileSync('sha256sum', ['--check', '--status', '.librdkafka-patches.sha256'], { cwd: join(out, 'node_modules/node-rdkafka/build/deps') });
      const port = await freePort();
      const asUser = process.getuid?.() === 0 ? ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups'] : [];
      // The image's volume for the journal, owned by the service's user as the Dockerfile does.
      const journal = join(dir, 'journal');
      mkdirSync(journal);
      if (asUser.length > 0) chownSync(journal, 65534, 65534);
      const proc = spawn(asUser[0] ?? process.execPath, [...asUser.slice(1), ...(asUser.length ? [process.execPath] : []), 'dist/src/main.js'], {
        cwd: out,
        env: { ...process.env, MQ_BROKERS: BROKERS, LISTEN_ADDR: `127.0.0.1:${port}`, WORKERS: '1', JOURNAL_DIR: journal },
        stdio: 'inherit',
      });
      try {
        let ready = 0;
        for (let i = 0; i < 100 && ready !== 200; i++) {
          ready = await fetch(`http://127.0.0.1:${port}/readyz`).then((r) => r.status, () => 0);
          if (ready !== 200) await new Promise((r) => setTimeout(r, 200));
        }
        expect(ready).toBe(200);
        expect((await postTrack(`http://127.0.0.1:${port}`, [point('image')])).status).toBe(202);
      } finally {
        // A service that failed to start has exited already: its exit event will not come again.
        if (proc.exitCode === null && proc.signalCode === null) {
          const exited = new Promise((r) => proc.once('exit', r));
          proc.kill('SIGTERM');
          await exited;
        }
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
