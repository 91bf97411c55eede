// The Kafka message of one accepted point (the README says what a consumer gets):
//   key   = container_id (UTF-8)
//   value = {"container_id":…,"lat":…,"lon":…,"timestamp":…,"speed":…}
// the bytes JSON.stringify would write for the point with its keys in this order, written by a
// fixed-shape serializer straight into one buffer (the tests hold the two to the same bytes).
//
// Numbers are written as Number::toString writes them, the same text JSON.stringify writes for any
// finite number ("0" for -0). The timestamp passed the RFC 3339 grammar, so it holds only digits, the
// letters T/t and Z/z, ':', '.', '+', '-': nothing to escape. The container id is free text: escaped
// as JSON.stringify escapes quotes, controls and lone surrogates.
import type { TrackPoint } from './schema.js';

/**
 * The messages of one request, as the producer hands them to librdkafka in one call
 * (Producer#produceBatch, patches/): bytes in one buffer, and four offsets per message into it.
 * Message i's value is data[messages[4i], messages[4i+1]) and its key
 * data[messages[4i+2], messages[4i+3]) (support/messages.ts reads them back, for the tests).
 */
export interface EncodedPoints {
  readonly count: number;
  readonly data: Uint8Array;
  readonly messages: Uint32Array;
  /** Sum of value and key bytes: what the producer's queue accounting counts. */
  readonly bytes: number;
  /** The largest single value, checked against the broker's message size limit. */
  readonly largestValue: number;
}

/**
 * Scratch space for one request, reused by every request of this worker (allocation and GC were 7 %
 * of a saturated worker's profile at 100 points per request). Safe because produceBatch copies every
 * message into librdkafka before it returns (RD_KAFKA_MSG_F_COPY), so the views are dead once the
 * request is enqueued.
 */
let out = Buffer.allocUnsafe(256 * 1024);
let messagesScratch = new Uint32Array(4 * 1024);

const bytesOf = (text: string) => Uint8Array.from(text, (ch) => ch.charCodeAt(0));
const OPEN = bytesOf('{"container_id":');
const LAT = bytesOf(',"lat":');
const LON = bytesOf(',"lon":');
const TIMESTAMP = bytesOf(',"timestamp":"');
const SPEED = bytesOf('","speed":');
/** Room for the constant parts of a value (57 bytes with the id's quotes) and three numbers as Number::toString writes them (≤ 25 bytes each). */
const VALUE_OVERHEAD = 192;

/**
 * Encodes the points of one request into the scratch buffer. The result views buffers that the next
 * call overwrites: hand it to the producer before encoding another request.
 *
 * Why bytes and not one string written at the end: turning a double into text costs V8 260–310 ns
 * when it is not in its small cache of recent numbers, which is every coordinate of real traffic (a
 * benchmark that repeats one body hits the cache every time). writeNumber writes the usual GPS value,
 * up to seven decimals, digit by digit instead (measured on bodies of distinct 6-decimal
 * coordinates: docs/performance.md, "Numbers, and what a repeated body hides").
 */
export function encodePoints(points: readonly TrackPoint[]): EncodedPoints {
  const count = points.length;
  const messages = scratchOffsets(count).subarray(0, 4 * count);
  let p = 0;
  let largestValue = 0;
  for (let i = 0; i < count; i++) {
    const point = points[i] as TrackPoint;
    const id = point.container_id;
    const timestamp = point.timestamp;
    // JSON escapes take at most 6 bytes per UTF-16 unit of the id; the timestamp is ASCII.
    reserve(p, VALUE_OVERHEAD + 6 * id.length + timestamp.length);
    const start = p;
    p = writeBytes(OPEN, p);
    p = writeJsonString(id, p);
    p = writeBytes(LAT, p);
    p = writeNumber(point.lat, p);
    p = writeBytes(LON, p);
    p = writeNumber(point.lon, p);
    p = writeBytes(TIMESTAMP, p);
    p = writeAscii(timestamp, p);
    p = writeBytes(SPEED, p);
    p = writeNumber(point.speed, p);
    out[p++] = 125; /* } */
    messages[4 * i] = start;
    messages[4 * i + 1] = p;
    if (p - start > largestValue) largestValue = p - start;
  }
  // The keys after the values.
  for (let i = 0; i < count; i++) {
    const id = (points[i] as TrackPoint).container_id;
    reserve(p, 3 * id.length);
    messages[4 * i + 2] = p;
    p = writeKey(id, p);
    messages[4 * i + 3] = p;
  }
  return { count, data: out.subarray(0, p), messages, bytes: p, largestValue };
}

/** Grows the scratch buffer, keeping its first `used` bytes, until `more` bytes fit after them. */
function reserve(used: number, more: number): void {
  if (used + more <= out.length) return;
  const bigger = Buffer.allocUnsafe(Math.max(used + more, out.length * 2));
  out.copy(bigger, 0, 0, used);
  out = bigger;
}

/**
 * The scratch buffer with room for `more` bytes after the first `used` (kept), for the other encoder
 * of this module's layout (single-pass.ts). One request uses one encoder's result, so they share it.
 */
export function scratchBytes(used: number, more: number): Buffer {
  reserve(used, more);
  return out;
}

/** The scratch offsets with room for `count` messages, those already written kept. */
export function scratchOffsets(count: number): Uint32Array {
  if (messagesScratch.length < 4 * count) {
    const bigger = new Uint32Array(Math.max(4 * count, messagesScratch.length * 2));
    bigger.set(messagesScratch);
    messagesScratch = bigger;
  }
  return messagesScratch;
}

function writeBytes(bytes: Uint8Array, p: number): number {
  const o = out;
  const n = bytes.length;
  for (let k = 0; k < n; k++) o[p + k] = bytes[k] as number;
  return p + n;
}

/** Text known to be ASCII (an RFC 3339 timestamp, Number::toString's output). */
function writeAscii(text: string, p: number): number {
  const o = out;
  const n = text.length;
  for (let k = 0; k < n; k++) o[p + k] = text.charCodeAt(k);
  return p + n;
}

/**
 * The id as JSON.stringify writes it: printable ASCII without quote or backslash (nearly every id)
 * byte by byte, anything else through JSON.stringify (escapes, lone surrogates) and UTF-8.
 */
function writeJsonString(id: string, p: number): number {
  const start = p;
  out[p++] = 34; /* " */
  for (let k = 0; k < id.length; k++) {
    const c = id.charCodeAt(k);
    if (c < 32 || c > 126 || c === 34 || c === 92) return start + out.write(JSON.stringify(id), start);
    out[p++] = c;
  }
  out[p++] = 34;
  return p;
}

/**
 * The key, into the scratch buffer at p (room reserved): the id in UTF-8, ASCII byte by byte,
 * otherwise converted alone as the binding's produce() converted a key (two ids written together
 * could join into one surrogate pair).
 */
export function writeKey(id: string, p: number): number {
  for (let k = 0; k < id.length; k++) {
    const c = id.charCodeAt(k);
    if (c > 127) return p + out.write(id, p);
    out[p + k] = c;
  }
  return p + id.length;
}

/** Decimal digits of the integer being written, least significant first. */
const digits = new Uint8Array(16);

/**
 * A finite number as Number::toString (and so JSON.stringify) writes it.
 *
 * When x is the double nearest to a decimal d of at most 7 decimals and 15 significant digits (r / 1e7
 * === x for the integer r = d × 10^7 says exactly that: r and 10^7 are exact doubles and the division
 * rounds correctly), d with its trailing zeros dropped is the shortest text that reads back as x,
 * because two decimals of at most 15 significant digits never round to the same double: that text
 * is Number::toString's for 1e-6 ≤ |x| < 1e21, and "0" for ±0. Any other number: Number::toString.
 */
function writeNumber(x: number, p: number): number {
  const r = Math.round(x * 1e7);
  const a = r < 0 ? -r : r;
  if (r / 1e7 !== x || (a !== 0 && (a < 10 || a >= 1e15))) return writeAscii('' + x, p);
  if (a === 0) {
    out[p] = 48; /* 0, also for -0 */
    return p + 1;
  }
  if (r < 0) out[p++] = 45; /* - */
  let n = 0;
  if (a < 0x80000000) {
    // Integer arithmetic (a double's % is a call to fmod: measured three times slower here).
    for (let q = a | 0; q > 0; n++) {
      const next = (q / 10) | 0;
      digits[n] = 48 + q - next * 10;
      q = next;
    }
  } else {
    for (let q = a; q > 0; n++) {
      const d = q % 10;
      digits[n] = 48 + d;
      q = (q - d) / 10;
    }
  }
  // The last seven digits are the decimals; above them the integer part, or 0.
  if (n > 7) for (let k = n - 1; k >= 7; k--) out[p++] = digits[k] as number;
  else out[p++] = 48;
  let lowest = 0; // the lowest decimal that is not a trailing zero
  while (lowest < 7 && (lowest >= n || digits[lowest] === 48)) lowest++;
  if (lowest < 7) {
    out[p++] = 46; /* . */
    for (let k = 6; k >= lowest; k--) out[p++] = k < n ? (digits[k] as number) : 48;
  }
  return p;
}
