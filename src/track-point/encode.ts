// The Kafka message of one accepted point (decisions, "The message written to the broker"):
//   key   = container_id (UTF-8)
//   value = {"container_id":…,"lat":…,"lon":…,"timestamp":…,"speed":…}
// written by a fixed-shape serializer rather than a generic JSON.stringify of each point.
import type { TrackPoint } from './schema.js';

/** The points of one request, encoded: values are views into one buffer, keys the container ids. */
export interface EncodedPoints {
  readonly count: number;
  readonly keys: string[];
  readonly values: Buffer[];
  /** Sum of value and key bytes: what the producer's queue accounting counts. */
  readonly bytes: number;
  /** The largest single value, checked against the broker's message size limit. */
  readonly largestValue: number;
}

/**
 * One value as a string. Numbers: `'' + n` is Number::toString, the same text JSON.stringify
 * writes for any finite number (and "0" for -0). `timestamp` passed the RFC 3339 grammar, so it
 * holds only digits, letters T/Z, ':', '.', '+', '-': nothing to escape. `container_id` is free
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

export function encodePoints(points: readonly TrackPoint[]): EncodedPoints {
  const count = points.length;
  const keys = new Array<string>(count);
  const texts = new Array<string>(count);
  let chars = 0;
  let keyBytes = 0;
  for (let i = 0; i < count; i++) {
    const p = points[i]!;
    keys[i] = p.container_id;
    keyBytes += Buffer.byteLength(p.container_id);
    const text = encodeValue(p);
    texts[i] = text;
    chars += text.length;
  }
  // One UTF-8 encoding and one allocation for the whole request instead of one per point
  // (node-rdkafka copies each value into librdkafka: RK_MSG_COPY, so views are safe to reuse).
  const all = Buffer.from(texts.join(''));
  const values = new Array<Buffer>(count);
  let largestValue = 0;
  if (all.length === chars) {
    // All ASCII (the usual case): byte offsets are character offsets.
    let offset = 0;
    for (let i = 0; i < count; i++) {
      const len = texts[i]!.length;
      values[i] = all.subarray(offset, offset + len);
      offset += len;
      if (len > largestValue) largestValue = len;
    }
  } else {
    for (let i = 0; i < count; i++) {
      const value = Buffer.from(texts[i]!);
      values[i] = value;
      if (value.length > largestValue) largestValue = value.length;
    }
  }
  return { count, keys, values, bytes: all.length + keyBytes, largestValue };
}
