// POST /track's body, once read: decompress, decode, parse, validate, encode. What comes out is the
// request's messages, ready for the write-ahead path, or why the body is refused (the answer itself
// is made by track-answers.ts).
//
//   bytes ─gunzip?─┬─▶ single pass: all points valid? ──────────────────────────────────────┬─▶ messages
//     413 / 400    │     └─ read whole, some values refused: 400 with zod's details            │
//                  └─▶ UTF-8 check ─▶ JSON.parse ─▶ array? ≤ MAX_POINTS? ─▶ zod ─▶ encode ─┘
//                         400            400          400      413           400
// The single pass (track-point/single-pass.ts) takes ordinary bodies, of valid points or of points
// with values out of the schema's rules; anything else takes the general path, which decides every
// other refusal.
import { isUtf8 } from 'node:buffer';
import { gunzipSync } from 'node:zlib';
import { encodePoints, type EncodedPoints } from '../track-point/encode.js';
import { encodeRegistryPoints, type RegistryFraming } from '../track-point/registry-encode.js';
import { validatePoints, type PointIssue, type ValidationResult } from '../track-point/schema.js';
import { singlePass, singlePassFor } from '../track-point/single-pass.js';

/** Why a body is refused: what its answer says (track-answers.ts, refuse). */
export interface BodyRefusal {
  readonly refused: 'invalid_json' | 'validation_failed' | 'payload_too_large';
  readonly message: string;
  /** Points of the request, counted as refused. */
  readonly points: number;
  readonly details?: readonly PointIssue[];
  /** A gzip body's bytes once inflated, when it was (what the refused-requests topic keeps). */
  readonly inflated?: Uint8Array;
}

export interface BodyLimits {
  maxBodyBytes: number;
  maxPoints: number;
}

/** The messages of an empty array: nothing to take, answered 202 {"accepted":0}. */
export const NO_POINTS: EncodedPoints = Object.freeze({ count: 0, data: new Uint8Array(0), messages: new Uint32Array(0), bytes: 0, largestValue: 0 });

const refused = (why: BodyRefusal['refused'], message: string, points = 0, details?: readonly PointIssue[]): BodyRefusal =>
  details === undefined ? { refused: why, message, points } : { refused: why, message, points, details };

/**
 * The messages of a request's body (views of scratch space the next body overwrites), or why it is
 * refused. `framing`: the values in that Schema Registry format (MQ_VALUE_FORMAT), null: JSON.
 */
export function decodeTrackBody(raw: Uint8Array, gzipped: boolean, limits: BodyLimits, framing: RegistryFraming | null = null): EncodedPoints | BodyRefusal {
  if (gzipped) {
    let bytes: Uint8Array;
    try {
      // maxOutputLength bounds a gzip bomb: inflating stops at the limit instead of filling memory.
      // Synchronous because the output is at most MAX_BODY_BYTES (1 MiB by default: ~2 ms).
      bytes = gunzipSync(raw, { maxOutputLength: limits.maxBodyBytes });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE')
        return refused('payload_too_large', `body is larger than ${limits.maxBodyBytes} bytes once decompressed`);
      return refused('invalid_json', `body is not valid gzip: ${(err as Error).message}`);
    }
    const decoded = decodeBytes(bytes, limits, framing);
    return 'refused' in decoded ? { ...decoded, inflated: bytes } : decoded;
  }
  return decodeBytes(raw, limits, framing);
}

/** decodeTrackBody, once the body is not gzip. */
function decodeBytes(bytes: Uint8Array, limits: BodyLimits, framing: RegistryFraming | null): EncodedPoints | BodyRefusal {
  // A body of valid points, as nearly every request is, goes from bytes to messages in one pass; so
  // does one whose points are read whole and refused.
  const direct = framing === null ? singlePass(bytes, limits.maxPoints) : singlePassFor(framing.format)(bytes, limits.maxPoints, framing);
  if (direct !== null) return 'details' in direct ? invalidPoints(direct, direct.count) : direct;

  // Buffer#toString would replace invalid sequences with U+FFFD and let them through; refuse instead.
  if (!isUtf8(bytes)) return refused('invalid_json', 'body is not valid UTF-8');
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');

  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    return refused(
      'invalid_json',
      text.length === 0 ? 'body is empty; expected a JSON array of track points' : `body is not valid JSON: ${(err as Error).message}`,
    );
  }
  if (!Array.isArray(parsed)) return refused('validation_failed', 'body must be a JSON array of track points');
  const count = parsed.length;
  if (count === 0) return NO_POINTS;
  if (count > limits.maxPoints) return refused('payload_too_large', `${count} track points in one request; at most ${limits.maxPoints} (MAX_POINTS)`, count);

  const result = validatePoints(parsed);
  if (!result.ok) return invalidPoints(result, count);
  return framing === null ? encodePoints(result.points) : encodeRegistryPoints(result.points, framing);
}

/** 400 validation_failed for a request of `count` points, some invalid. */
function invalidPoints(result: ValidationResult & { ok: false }, count: number): BodyRefusal {
  const n = result.invalidPoints;
  return refused('validation_failed', `${n} invalid track point${n === 1 ? '' : 's'}`, count, result.details);
}
