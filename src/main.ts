// Entry point: read the configuration once, then become the primary or a worker.
// The primary validates the configuration before it forks, librdkafka's properties included (each
// asked of librdkafka, kafka/settings.ts), so a bad value stops start-up with one message naming the
// variable (exit 2) rather than a crash loop of workers.
import cluster from 'node:cluster';
import { ConfigError, loadConfig, type Config } from './config.js';
import { EXIT } from './exit-codes.js';
import { producerSettings } from './kafka/settings.js';
import { runPrimary } from './supervisor.js';
import { runWorker } from './worker.js';

let config: Readonly<Config>;
try {
  config = loadConfig();
  if (cluster.isPrimary) producerSettings(config, 'configuration-check');
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  process.stderr.write(`configuration error: ${err.message}\n`);
  process.exit(EXIT.CONFIG);
}

if (cluster.isPrimary) runPrimary(config);
else await runWorker(config);
