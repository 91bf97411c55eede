// The sinks' own poll: a timer of librdkafka's poll period that runs while there is work (records in
// flight, to produce again, or in a transaction), and stops itself when there is none.
import type { ProducerRefusal } from '../api/errors.js';
import type { Journal } from '../journal/journal.js';
import { POLL_INTERVAL_MS } from '../kafka/broker-link.js';

export class EveryPoll {
  private timer: NodeJS.Timeout | null = null;

  /** `pass` runs every poll and answers whether work is left. */
  constructor(private readonly pass: () => boolean) {}

  /** Runs the pass every poll from now on, until it says nothing is left; cheap when already running. */
  follow(): void {
    this.timer ??= setInterval(() => {
      if (!this.pass()) this.stop();
    }, POLL_INTERVAL_MS);
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }
}

/**
 * Resolves true once `emptied()` holds, or false at the deadline or as soon as nothing can empty:
 * the journal or the producer failed. Checked every few polls.
 */
export async function whenEmptied(
  emptied: () => boolean,
  journal: Pick<Journal, 'failure'>,
  producer: { readonly refusal: ProducerRefusal | null },
  deadline: number,
): Promise<boolean> {
  const failed = () => journal.failure !== null || producer.refusal === 'producer_failed';
  while (!emptied() && Date.now() < deadline && !failed()) {
    await new Promise((resolve) => setTimeout(resolve, Math.max(1, Math.min(5 * POLL_INTERVAL_MS, deadline - Date.now()))));
  }
  return emptied();
}

/** Lets the poll loop run once more: failure reports of the last messages reach JavaScript through it. */
export function aPollLater(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, POLL_INTERVAL_MS * 2));
}
