// Entry point: read the configuration once, then become the primary or a worker, or with `drain`
// produce what JOURNAL_DIR holds and exit (process/drain.ts).
// The primary validates the configuration before it forks, librdkafka's properties included (each
// asked of librdkafka, kafka/settings.ts), so a bad value stops start-up with one message naming the
// variable (exit 2) rather than a crash loop of workers. It also picks the uWebSockets.js build the
// workers will load (http/uws.ts): where none loads on this Node and C library, one line says what to
// install (exit 5).
import cluster from 'node:cluster';
import { ConfigError, loadConfig, type Config } from './config.js';
import { EXIT } from './process/exit-codes.js';
import { currentRuntime, UwsUnavailable, uwsBuild } from './http/uws.js';
import { producerSettings, refusedProducerSettings } from './kafka/settings.js';
import { runDrain } from './process/drain.js';
import { runPrimary } from './process/supervisor.js';
import { runWorker } from './process/worker.js';

let config: Readonly<Config>;
try {
  config = loadConfig();
  if (cluster.isPrimary) {
    producerSettings(config, 'configuration-check');
    if (config.refused !== null) refusedProducerSettings(config, 'configuration-check', config.refused);
  }
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  process.stderr.write(`configuration error: ${err.message}\n`);
  process.exit(EXIT.CONFIG);
}

const command = cluster.isPrimary ? process.argv[2] : undefined;
if (command !== undefined && command !== 'drain') {
  process.stderr.write(`unknown command ${command}: run with none to serve, or \`drain\` to produce what JOURNAL_DIR holds and exit\n`);
  process.exit(EXIT.CONFIG);
}
if (command === 'drain') await runDrain(config);
else if (cluster.isPrimary) {
  let uws: string;
  try {
    uws = uwsBuild().version;
  } catch (err) {
    if (!(err instanceof UwsUnavailable)) throw err;
    process.stderr.write(`cannot start: ${err.message}\n${err.attempts.map((a) => `  uWebSockets.js v${a.version}: ${a.error}\n`).join('')}`);
    process.exit(EXIT.RUNTIME);
  }
  const { node, glibc } = currentRuntime();
  runPrimary(config, { uws, node, glibc });
} else await runWorker(config);
