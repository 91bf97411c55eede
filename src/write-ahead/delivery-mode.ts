// The delivery mode, chosen once per process (a worker, or `drain`): one sink of its own each.
//   DELIVERY=exactly-once ──▶ exactly-once.ts
//   ACK_MODE=delivered    ──▶ delivered.ts
//   otherwise             ──▶ at-least-once.ts (ACK_MODE=async, the default)
import type { DeliverySink, SinkOptions } from './acceptance.js';
import { AtLeastOnceSink } from './at-least-once.js';
import { DeliveredSink } from './delivered.js';
import { ExactlyOnceSink } from './exactly-once.js';

/** The mode's sink; `exactlyOnce` is the same sink when DELIVERY=exactly-once (its start has a step of its own), else null. */
export function sinkOfMode(opts: SinkOptions, journalId: string | null): { sink: DeliverySink; exactlyOnce: ExactlyOnceSink | null } {
  if (opts.config.exactlyOnce !== null) {
    if (journalId === null) throw new Error("DELIVERY=exactly-once needs the journal directory's identity");
    const sink = new ExactlyOnceSink(opts, journalId);
    return { sink, exactlyOnce: sink };
  }
  return { sink: opts.config.ackMode === 'delivered' ? new DeliveredSink(opts) : new AtLeastOnceSink(opts), exactlyOnce: null };
}
