// The value schema's registration, at a worker's start: until the registry gives the schema's id,
// the worker takes no point (an id is in every value's first bytes) and /readyz says why; an
// unreachable registry is asked again with a back-off, a refusal (an incompatible schema, a wrong
// password) stops the start, because no retry heals it.
//
//   start ─ register ─┬─ id ──────────────▶ ready: values framed with it (registry-encode.ts)
//                     ├─ unreachable / 5xx ▶ /readyz 503 naming the registry; again in 0.5 s … 5 s
//                     └─ 409 / 4xx ───────▶ onRefused (the worker exits 2, and the service with it)
import type { SchemaRegistry } from '../config.js';
import type { Logger } from '../log.js';
import { registryFraming, type RegistryFraming } from '../track-point/registry-encode.js';
import { SCHEMA_TYPE, schemaText } from '../track-point/registry-schemas.js';
import { RegistryClient, RegistryRefusal, RegistryUnavailable } from './registry-client.js';

const FIRST_RETRY_MS = 500;
const LONGEST_RETRY_MS = 5_000;

export class SchemaRegistration {
  /** The values' framing once the id is known; null until then. */
  framing: RegistryFraming | null = null;
  /** Why no point is taken yet (/readyz). */
  reason: string;
  private readonly client: RegistryClient;
  private readonly settled: Promise<void>;
  private settle: () => void = () => undefined;
  private stopped = false;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly registry: SchemaRegistry,
    private readonly log: Logger,
    /** The registry refused the schema: the message says what to do. */
    private readonly onRefused: (message: string) => void,
  ) {
    this.client = new RegistryClient(registry);
    this.reason = `registering the ${registry.format} schema under subject ${registry.subject} at the Schema Registry ${registry.url}`;
    this.settled = new Promise((resolve) => (this.settle = resolve));
  }

  start(): void {
    void this.attempt(FIRST_RETRY_MS);
  }

  /** Resolves true once the id is known, or false after timeoutMs (or a refusal). */
  async whenRegistered(timeoutMs: number): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.settled, new Promise((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    clearTimeout(timer);
    return this.framing !== null;
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
  }

  private async attempt(nextDelayMs: number): Promise<void> {
    const { format, subject, url } = this.registry;
    try {
      const registered = await this.client.register(schemaText(format), SCHEMA_TYPE[format]);
      if ('id' in registered) {
        this.framing = registryFraming(format, registered.id);
        this.reason = '';
        this.log.info({ format, subject, schemaId: registered.id, registry: url }, 'value schema registered');
        return this.settle();
      }
      const level = await this.client.compatibility().catch((err: Error) => `unknown (${err.message})`);
      this.refused(
        `the Schema Registry at ${url} refuses the ${format} schema as incompatible with subject ${subject}'s earlier versions ` +
          `(compatibility ${level}): ${registered.incompatible}. Make the change compatible (BACKWARD: add fields with a default, remove ` +
          `fields that had one; docs/operations.md, "Changing the value schema"), or publish it under a new subject (SCHEMA_SUBJECT_STRATEGY, MQ_TOPIC)`,
      );
    } catch (err) {
      if (err instanceof RegistryRefusal) {
        const hint = err.status === 401 || err.status === 403 ? ' (check SCHEMA_REGISTRY_USER and SCHEMA_REGISTRY_PASSWORD, or SCHEMA_REGISTRY_TOKEN)' : '';
        return this.refused(`the Schema Registry refused the schema: ${err.message}${hint}`);
      }
      const why = err instanceof RegistryUnavailable ? err.message : String(err);
      this.reason = `the Schema Registry ${url} cannot give the value schema's id (${why}); asking again in ${nextDelayMs} ms`;
      this.log.warn(
        { registry: url, subject, retryInMs: nextDelayMs, err: why },
        'Schema Registry unreachable: no point is taken until it gives the schema id',
      );
      if (this.stopped) return;
      this.timer = setTimeout(() => void this.attempt(Math.min(2 * nextDelayMs, LONGEST_RETRY_MS)), nextDelayMs);
      this.timer.unref();
    }
  }

  private refused(message: string): void {
    this.reason = message;
    this.settle();
    this.onRefused(message);
  }
}
