// The primary's restart back-off, as a function of the crashes of the last minute.
import { describe, expect, it } from 'vitest';
import { restartDelay } from '../../../src/process/supervisor.js';

describe('restartDelay', () => {
  it('replaces a lone crash at once, then waits twice as long for each more within a minute, up to 10 s', () => {
    const crashes: number[] = [];
    const delays = Array.from({ length: 10 }, (_, i) => restartDelay(crashes, 1_000 + i * 100));
    expect(delays).toEqual([0, 100, 200, 400, 800, 1_600, 3_200, 6_400, 10_000, 10_000]);
  });

  it('forgets crashes older than a minute: a crash a minute after the last loop is a lone one again', () => {
    const crashes: number[] = [];
    for (let i = 0; i < 5; i++) restartDelay(crashes, i * 1_000);
    expect(restartDelay(crashes, 4_000 + 60_001)).toBe(0);
    expect(crashes).toHaveLength(1);
  });
});
