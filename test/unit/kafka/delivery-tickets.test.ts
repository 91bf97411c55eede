// ACK_MODE=delivered: a request is answered once, when its last point reported or when the deadline
// passed first; what is missing at the deadline counts as possibly written.
import { describe, expect, it } from 'vitest';
import { newTicket, TicketDeadlines, type DeliveryTicket } from '../../../src/kafka/delivery-reports.js';

function tickets(count: number, enqueuedAt: number) {
  const settled: DeliveryTicket[] = [];
  const made = Array.from({ length: count }, () => {
    const t = newTicket((ticket) => settled.push(ticket));
    t.remaining = 3;
    t.enqueuedAt = enqueuedAt;
    return t;
  });
  return { made, settled };
}

describe('TicketDeadlines', () => {
  it('settles a request still missing reports at DELIVERY_TIMEOUT_MS + margin, counting the missing points as uncertain, and only then', () => {
    let now = 0;
    const deadlines = new TicketDeadlines(2_000, 500, () => now);
    const { made, settled } = tickets(2, 0);
    for (const t of made) deadlines.watch(t);
    made[0]!.remaining = 1; // two of its points reported acknowledged
    now = 2_499;
    deadlines.sweep();
    expect(settled).toEqual([]);
    now = 2_500;
    deadlines.sweep();
    expect(settled.map((t) => [t.failed, t.uncertain, t.settled])).toEqual([
      [1, 1, true],
      [3, 3, true],
    ]);
    expect(settled[0]!.firstError).toMatch(/no delivery report within DELIVERY_TIMEOUT_MS \+ 500 ms/);
    expect(deadlines.size).toBe(0);
  });

  it('leaves a request alone once it was answered, and forgets it', () => {
    let now = 0;
    const deadlines = new TicketDeadlines(1_000, 100, () => now);
    const { made, settled } = tickets(1, 0);
    deadlines.watch(made[0]!);
    made[0]!.settled = true; // every point reported in time
    now = 5_000;
    deadlines.sweep();
    expect(settled).toEqual([]);
    expect(deadlines.size).toBe(0);
  });

  it('looks no further than the first request still within its time (all share one timeout)', () => {
    let now = 0;
    const deadlines = new TicketDeadlines(1_000, 0, () => now);
    const early = tickets(1, 0);
    const late = tickets(1, 800);
    deadlines.watch(early.made[0]!);
    deadlines.watch(late.made[0]!);
    now = 1_000;
    deadlines.sweep();
    expect([early.settled.length, late.settled.length, deadlines.size]).toEqual([1, 0, 1]);
    now = 1_800;
    deadlines.sweep();
    expect([late.settled.length, deadlines.size]).toEqual([1, 0]);
  });
});
