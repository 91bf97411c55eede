// Before a worker listens, POST /track's decoding runs over every kind of body it will meet: valid
// points, and each kind of refusal, of the single pass and of the general path.
//
// Why: V8 compiles the hot path (the single pass, readNumber, decodeBytes) for what it has seen run.
// Compiled on valid points alone, that code is thrown away (deoptimized: "wrong map", "insufficient
// type feedback") the first time a refused body takes a branch it never took, and every valid request
// then runs unoptimized until V8 compiles it again. When a bad firmware release starts sending
// thousands of refused bodies a second, valid requests' p99 grew several times over for seconds, until
// V8 compiled it again. Having seen both kinds of body
// first, the compiled code keeps both branches. Nothing here reaches the write-ahead path, the
// metrics or a socket: only the functions that turn bytes into messages or into a refusal's answer.
import { gzipSync } from 'node:zlib';
import type { RegistryFraming } from '../track-point/registry-encode.js';
import { CONTAINER_ID_MAX_LENGTH } from '../track-point/schema.js';
import { decodeTrackBody, type BodyLimits } from './track-body.js';
import { refuse } from './track-answers.js';

/** Each body decoded this many times: enough for V8 to gather type feedback and compile (70 to 150 ms in all). */
const ROUNDS = 300;

const point = (i: number, changes: Record<string, unknown> = {}, without?: string): Record<string, unknown> => {
  const p: Record<string, unknown> = {
    container_id: `WARM-${i % 16}`,
    lat: 51.9 + i / 1e4,
    lon: 4.4 - i / 1e4,
    timestamp: '2024-05-01T12:00:00.123Z',
    speed: i % 30,
    ...changes,
  };
  return without === undefined ? p : Object.fromEntries(Object.entries(p).filter(([key]) => key !== without));
};

/** The bodies: what devices send, and what a bad release or a broken client sends (exported for its test). */
export function warmUpBodies(): { bytes: Uint8Array; gzipped: boolean }[] {
  const texts = [
    // valid: one point, a hundred, without speed, spaced out by another JSON writer
    JSON.stringify([point(1)]),
    JSON.stringify(Array.from({ length: 100 }, (_, i) => point(i))),
    JSON.stringify([point(2, {}, 'speed')]),
    JSON.stringify([point(3)], null, 1),
    '[]',
    // refused by the single pass: a value out of its range or length, a bad timestamp, a field absent
    JSON.stringify([point(4, { lat: 95 })]),
    JSON.stringify([point(5, { lon: -200 }), point(6), point(7, { speed: -1 })]),
    JSON.stringify([point(8, { container_id: '' })]),
    JSON.stringify([point(9, { container_id: 'x'.repeat(CONTAINER_ID_MAX_LENGTH + 1) })]),
    JSON.stringify([point(10, { timestamp: '2024-05-01 12:00' })]),
    JSON.stringify([point(11, {}, 'lat'), point(12, {}, 'container_id')]),
    JSON.stringify(Array.from({ length: 100 }, (_, i) => point(i, i % 3 === 0 ? { lat: 91 + i } : {}))),
    // refused by the general path: another type, not an array, not JSON, an escape
    JSON.stringify([point(13, { lat: '51.9' })]),
    JSON.stringify([point(14, { container_id: 'WARM-\\n' })]),
    JSON.stringify(point(15)),
    '[{"container_id":',
    '',
  ];
  const bodies = texts.map((text) => ({ bytes: Buffer.from(text), gzipped: false }));
  bodies.push({ bytes: gzipSync(texts[0]!), gzipped: true }, { bytes: gzipSync(texts[5]!), gzipped: true });
  return bodies;
}

/**
 * Decodes each kind of body ROUNDS times, and makes each refusal's answer; returns the milliseconds
 * it took. `framing`: a registry format's (its schema id does not matter: the single pass is compiled
 * per format, single-pass.ts).
 */
export function warmUpTrackBody(limits: BodyLimits, framing: RegistryFraming | null = null): number {
  const started = performance.now();
  const bodies = warmUpBodies();
  for (let round = 0; round < ROUNDS; round++) {
    for (const { bytes, gzipped } of bodies) {
      const decoded = decodeTrackBody(bytes, gzipped, limits, framing);
      if ('refused' in decoded) refuse(decoded.refused, decoded.message, decoded.points, decoded.details);
    }
  }
  return performance.now() - started;
}
