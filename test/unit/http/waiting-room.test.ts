import { describe, expect, it } from 'vitest';
import type { ProducerRefusal as Refusal } from '../../../src/api/errors.js';
import { WaitingRoom, type Waiter } from '../../../src/http/waiting-room.js';

/** A producer whose queue takes `room` more requests; null room: an admission that always refuses with `refusal`. */
function queue(room: number) {
  const q = { room, refusal: 'queue_full' as Refusal, released: [] as { id: string; refusal: Refusal | null; at: number }[] };
  const admission = (): Refusal | null => (q.room > 0 ? null : q.refusal);
  return { q, admission };
}

function waiter(id: string, q: ReturnType<typeof queue>['q'], bytes = 100): Waiter {
  return {
    since: performance.now(),
    bytes,
    release(refusal) {
      q.released.push({ id, refusal, at: performance.now() });
      if (refusal === null) q.room--; // the request's points fill one place
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('WaitingRoom', () => {
  it('lets a request go on at once when there is room and nobody waits', () => {
    const { q, admission } = queue(1);
    const room = new WaitingRoom(admission, 200, 1000);
    expect(room.mayWait(null)).toBe(false);
    expect(room.enter(waiter('a', q))).toBe(true);
    expect(q.released).toEqual([{ id: 'a', refusal: null, at: expect.any(Number) }]);
    expect(room.size).toBe(0);
  });

  it('lets waiting requests go on oldest first, as room appears, each taking its place before the next is looked at', async () => {
    const { q, admission } = queue(0);
    const room = new WaitingRoom(admission, 1000, 1000);
    expect(room.mayWait('queue_full')).toBe(true);
    for (const id of ['a', 'b', 'c']) room.enter(waiter(id, q));
    await sleep(20);
    expect(q.released).toEqual([]);
    // A request that admission would take waits behind them.
    expect(room.mayWait(null)).toBe(true);
    q.room = 2;
    await sleep(20);
    expect(q.released.map((r) => [r.id, r.refusal])).toEqual([
      ['a', null],
      ['b', null],
    ]);
    expect(room.size).toBe(1);
    q.room = 1;
    await sleep(20);
    expect(q.released.map((r) => r.id)).toEqual(['a', 'b', 'c']);
    expect(room.size).toBe(0);
  });

  it('refuses queue_full a request still without room after the wait, not before', async () => {
    const { q, admission } = queue(0);
    const room = new WaitingRoom(admission, 60, 1000);
    const w = waiter('a', q);
    room.enter(w);
    await sleep(30);
    expect(q.released).toEqual([]);
    await sleep(80);
    expect(q.released.map((r) => [r.id, r.refusal])).toEqual([['a', 'queue_full']]);
    expect(q.released[0]!.at - w.since).toBeGreaterThanOrEqual(60);
  });

  it('ends every wait at once with any refusal other than a full queue (broker down, shutdown)', async () => {
    const { q, admission } = queue(0);
    const room = new WaitingRoom(admission, 10_000, 1000);
    room.enter(waiter('a', q));
    room.enter(waiter('b', q));
    q.refusal = 'shutting_down';
    await sleep(20);
    expect(q.released.map((r) => [r.id, r.refusal])).toEqual([
      ['a', 'shutting_down'],
      ['b', 'shutting_down'],
    ]);
    expect(room.mayWait('broker_unavailable')).toBe(false);
  });

  it('keeps at most maxBytes of bodies, and nothing waits with QUEUE_FULL_WAIT_MS=0', () => {
    const { q, admission } = queue(0);
    const room = new WaitingRoom(admission, 10_000, 250);
    expect(room.enter(waiter('a', q, 200))).toBe(true);
    expect(room.enter(waiter('b', q, 100))).toBe(false);
    expect(room.size).toBe(1);
    expect(new WaitingRoom(admission, 0, 250).mayWait('queue_full')).toBe(false);
    q.refusal = 'broker_unavailable'; // let the timer end
  });
});
