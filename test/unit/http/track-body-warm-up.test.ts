// The warm-up before a worker listens: its bodies must take every branch a flood of refused bodies
// takes, or the valid requests' compiled code is thrown away at the flood's first refusal (the
// p99 at its onset: bench/refused-flood.ts with FLOOD_WARM=0).
import { gunzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { warmUpBodies, warmUpTrackBody } from '../../../src/http/track-body-warm-up.js';
import { decodeTrackBody } from '../../../src/http/track-body.js';
import { singlePass } from '../../../src/track-point/single-pass.js';

const limits = { maxBodyBytes: 1 << 20, maxPoints: 1000 };

describe('warmUpTrackBody', () => {
  it('decodes bodies of every kind: taken by the single pass, refused by it, taken and refused by the general path, gzip of both', () => {
    const kinds = new Set<string>();
    for (const { bytes, gzipped } of warmUpBodies()) {
      const plain = gzipped ? gunzipSync(bytes) : bytes;
      const direct = singlePass(plain, limits.maxPoints);
      const decoded = decodeTrackBody(bytes, gzipped, limits);
      const kind =
        direct === null
          ? 'refused' in decoded
            ? 'general path, refused'
            : 'general path, taken'
          : 'details' in direct
            ? 'single pass, refused'
            : 'single pass, taken';
      kinds.add(gzipped ? `gzip, ${'refused' in decoded ? 'refused' : 'taken'}` : kind);
      if ('refused' in decoded) kinds.add(decoded.refused);
    }
    expect([...kinds].sort()).toEqual([
      'general path, refused',
      'general path, taken',
      'gzip, refused',
      'gzip, taken',
      'invalid_json',
      'single pass, refused',
      'single pass, taken',
      'validation_failed',
    ]);
  });

  it('runs with any limits, a body over them refused like any other', () => {
    expect(warmUpTrackBody({ maxBodyBytes: 64, maxPoints: 1 })).toBeGreaterThan(0);
  });
});
