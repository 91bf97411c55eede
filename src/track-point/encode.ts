// The Kafka message of one accepted point (README, "The Kafka messages"):
//   key   = container_id (UTF-8)
//   value = {"container_id":…,"lat":…,"lon":…,"timestamp":…,"speed":…}
// written by a fixed-shape serializer rather than a generic JSON.stringify of each point.
import type { TrackPoint } from './schema.js';

/**
 * The points of one request, encoded as the producer hands them to librdkafka in one call
 * (Producer#produceBatch, patches/): the values one after the other, then the keys, in one buffer.
 * Message i's value is data[valueEnds[i-1] (0 for i = 0), valueEnds[i]) and its key
 * data[keyEnds[i-1] (valueEnds[count-1] for i = 0), keyEnds[i]); messagesOf() reads them back.
 */
export interface EncodedPoints {
  readonly count: number;
  readonly data: Buffer;
  readonly valueEnds: Uint32Array;
  readonly keyEnds: Uint32Array;
  /** Sum of value and key bytes: what the producer's queue accounting counts. */
  readonly bytes: number;
  /** The largest single value, checked against the broker's message size limit. */
  readonly largestValue: number;
}

/**
 * One value as a string. Numbers: `'' + n` is Number::toString, the same text JSON.stringify
 * writes for any finite number (and "0" for -0). `timestamp` passed the RFC 3339 grammar, so it
 * holds only digits, the letters T/t and Z/z, ':', '.', '+', '-': nothing to escape. `container_id` is free
 * text and goes through JSON.stringify, which escapes quotes, controls and lone surrogates.
 */
export function encodeValue(p: TrackPoint): string {
  return (
    '{"container_id":' + JSON.stringify(p.container_id) +
    ',"lat":' + p.lat +
    ',"lon":' + p.lon +
    ',"timestamp":"' + p.timestamp +
    '","speed":' + p.speed +
    '}'
  );
}

/**
 * Scratch space for one request, reused by every request of this worker: one UTF-8 write per
 * request instead of new buffers (allocation and GC were 7 % of a saturated worker's profile at 100
 * points per request). Safe because produceBatch copies every message into librdkafka before it
 * returns (RD_KAFKA_MSG_F_COPY), so the views are dead once the request is enqueued.
 */
let scratch = Buffer.allocUnsafe(256 * 1024);
let valueEndsScratch = new Uint32Array(1024);
let keyEndsScratch = new Uint32Array(1024);

/**
 * Encodes the points of one request. The result views buffers that the next call overwrites: hand
 * it to the producer before encoding another request.
 */
export function encodePoints(points: readonly TrackPoint[]): EncodedPoints {
  const count = points.length;
  if (valueEndsScratch.length < count) {
    valueEndsScratch = new Uint32Array(count);
    keyEndsScratch = new Uint32Array(count);
  }
  const valueEnds = valueEndsScratch.subarray(0, count);
  const keyEnds = keyEndsScratch.subarray(0, count);
  let values = '';
  let keys = '';
  // Character offsets first; byte offsets below.
  for (let i = 0; i < count; i++) {
    const p = points[i] as TrackPoint;
    values += encodeValue(p);
    valueEnds[i] = values.length;
    keys += p.container_id;
    keyEnds[i] = keys.length;
  }
  const most = (values.length + keys.length) * 3;
  if (scratch.length < most) scratch = Buffer.allocUnsafe(Math.max(most, scratch.length * 2));
  const valueBytes = scratch.write(values, 0);
  // Non-ASCII text (rare: container ids are free text) makes byte offsets differ from characters.
  // Values are JSON (lone surrogates escaped) and start and end with braces: their slices encode alone
  // as they do together. Keys are raw: two keys may join into one surrogate pair, so write each alone.
  if (valueBytes !== values.length) toByteOffsets(values, valueEnds);
  let keyBytes = scratch.write(keys, valueBytes);
  const keysAscii = keyBytes === keys.length;
  if (!keysAscii) keyBytes = writeKeysOneByOne(points, keyEnds, valueBytes) - valueBytes;
  // Indexed, not for-of: iterating a Uint32Array cost 5 % more of this function (measured). `?? 0`
  // never applies (i < count = the arrays' length); it stands for the assertion the type wants.
  let largestValue = 0;
  let start = 0;
  for (let i = 0; i < count; i++) {
    const end = valueEnds[i] ?? 0;
    if (end - start > largestValue) largestValue = end - start;
    start = end;
    if (keysAscii) keyEnds[i] = (keyEnds[i] ?? 0) + valueBytes;
  }
  return { count, data: scratch.subarray(0, valueBytes + keyBytes), valueEnds, keyEnds, bytes: valueBytes + keyBytes, largestValue };
}

/** Rewrites character offsets into `text` as UTF-8 byte offsets. */
function toByteOffsets(text: string, ends: Uint32Array): void {
  let chars = 0;
  let bytes = 0;
  for (let i = 0; i < ends.length; i++) {
    const end = ends[i] ?? 0;
    bytes += Buffer.byteLength(text.slice(chars, end));
    chars = end;
    ends[i] = bytes;
  }
}

/** Writes each container id from `at` on, converted alone as node-rdkafka's produce() converted a key; returns the end. */
function writeKeysOneByOne(points: readonly TrackPoint[], ends: Uint32Array, at: number): number {
  let pos = at;
  for (let i = 0; i < ends.length; i++) {
    pos += scratch.write((points[i] as TrackPoint).container_id, pos);
    ends[i] = pos;
  }
  return pos;
}

/** The messages of an encoded request as keys and values (copies): what Kafka receives, for checks. */
export function messagesOf(batch: EncodedPoints): { keys: string[]; values: Buffer[] } {
  const keys: string[] = [];
  const values: Buffer[] = [];
  let value = 0;
  let key = batch.valueEnds[batch.count - 1] ?? 0;
  for (let i = 0; i < batch.count; i++) {
    const valueEnd = batch.valueEnds[i] ?? 0;
    const keyEnd = batch.keyEnds[i] ?? 0;
    values.push(Buffer.from(batch.data.subarray(value, valueEnd)));
    keys.push(batch.data.toString('utf8', key, keyEnd));
    value = valueEnd;
    key = keyEnd;
  }
  return { keys, values };
}
