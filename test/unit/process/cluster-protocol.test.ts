// What the primary and the workers say to each other: only our messages pass, whatever else uses
// the channel; the slot a worker is forked with.
import { describe, expect, it } from 'vitest';
import { isPrimaryMessage, isWorkerMessage, STANDBY_SLOT, WORKER_SLOT_ENV, workerSlot } from '../../../src/process/cluster-protocol.js';

describe('cluster protocol', () => {
  it('recognises the messages of each side and nothing else', () => {
    expect(isWorkerMessage({ type: 'ingest:worker-listening' })).toBe(true);
    expect(isWorkerMessage({ type: 'ingest:collect!', id: 1, metrics: [] })).toBe(true);
    expect(isPrimaryMessage({ type: 'ingest:shutdown' })).toBe(true);
    expect(isPrimaryMessage({ type: 'ingest:standby-activate', slot: 2 })).toBe(true);
    for (const foreign of [null, undefined, 'ingest:shutdown', 42, {}, { type: 7 }, { type: 'other' }, { cmd: 'NODE_CLUSTER' }]) {
      expect(isWorkerMessage(foreign)).toBe(false);
      expect(isPrimaryMessage(foreign)).toBe(false);
    }
    // Each side's messages are not the other's.
    expect(isPrimaryMessage({ type: 'ingest:worker-listening' })).toBe(false);
    expect(isWorkerMessage({ type: 'ingest:shutdown' })).toBe(false);
  });

  it('refuses a slot hand-over without a slot', () => {
    expect(isPrimaryMessage({ type: 'ingest:standby-activate' })).toBe(false);
    expect(isPrimaryMessage({ type: 'ingest:standby-activate', slot: '1' })).toBe(false);
  });

  it('reads the slot a worker was forked with: a number, standby, or 0 outside the cluster', () => {
    expect(workerSlot({ [WORKER_SLOT_ENV]: '3' })).toBe(3);
    expect(workerSlot({ [WORKER_SLOT_ENV]: STANDBY_SLOT })).toBeNull();
    expect(workerSlot({})).toBe(0);
    expect(workerSlot({ [WORKER_SLOT_ENV]: '-1' })).toBe(0);
  });
});
