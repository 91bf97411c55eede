// Structured JSON logs (pino). Nothing is logged per request at info level; errors that repeat
// (a broker that is down, deliveries that fail) go through `Throttled`, once per interval with a count.
import { destination, pino, type Logger } from 'pino';

export type { Logger };

/** To standard output, or (`drain`, whose standard output is its summary) to standard error. */
export function createLogger(level: string, bindings: Record<string, unknown>, to: 'stdout' | 'stderr' = 'stdout'): Logger {
  const options = { level, base: { pid: process.pid, ...bindings } };
  return to === 'stdout' ? pino(options) : pino(options, destination({ dest: 2, sync: true }));
}

/** Logs the first occurrence at once, then at most once per interval with how many were folded in. */
export class Throttled {
  private suppressed = 0;
  private lastAt = -Infinity;
  private timer: NodeJS.Timeout | null = null;
  private lastFields: Record<string, unknown> = {};

  constructor(
    private readonly log: Logger,
    private readonly level: 'warn' | 'error',
    private readonly message: string,
    private readonly intervalMs = 10_000,
  ) {}

  report(fields: Record<string, unknown>, count = 1): void {
    const now = Date.now();
    if (now - this.lastAt >= this.intervalMs) {
      this.lastAt = now;
      this.log[this.level]({ ...fields, count }, this.message);
      return;
    }
    this.suppressed += count;
    this.lastFields = fields;
    this.timer ??= setTimeout(() => this.flush(), this.intervalMs - (now - this.lastAt)).unref();
  }

  flush(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (this.suppressed === 0) return;
    this.lastAt = Date.now();
    this.log[this.level]({ ...this.lastFields, count: this.suppressed }, `${this.message} (repeated)`);
    this.suppressed = 0;
  }
}
