// The message value in a Schema Registry format (MQ_VALUE_FORMAT avro, protobuf or json-schema), in
// Confluent's wire format, which every registry-aware reader expects (Kafka Connect, Flink, ksqlDB,
// Apicurio's and Confluent's serdes):
//
//   0x00 │ schema id, u32 big-endian │ Protobuf only: the message-index list, [0] written as one 0x00 │ payload
//
// Payloads, the fields in the zod schema's order (registry-schemas.ts):
//   avro         a string is its byte length (zig-zag varint) and its UTF-8; a double 8 bytes little-endian
//   protobuf     field n: its tag (n << 3 | wire type), a string length-delimited (2), a double fixed64 (1);
//                every field written, zeros too, so that a value's bytes never depend on its numbers
//   json-schema  the JSON value exactly as MQ_VALUE_FORMAT=json writes it (encode.ts)
//
// The key, the partitioner and the timestamp are the same in every format. The general path writes
// from validated points here; the single pass (single-pass.ts) writes from the body's bytes with the
// same helpers.
import { encodePoints, scratchBytes, scratchOffsets, writeKey, type EncodedPoints } from './encode.js';
import { valueFields, type RegistryFormat, type ValueField } from './registry-schemas.js';
import type { TrackPoint } from './schema.js';

/** A registry format and its schema id: what every value of this worker starts with. */
export interface RegistryFraming {
  readonly format: RegistryFormat;
  /** The wire format's header: magic byte, schema id, and Protobuf's message index. */
  readonly header: Uint8Array;
}

/** Where the HTTP edge reads the values' framing: null for JSON, and until a registry gave the id. */
export interface FramingSource {
  readonly framing: RegistryFraming | null;
}

export const JSON_VALUES: FramingSource = Object.freeze({ framing: null });

export function registryFraming(format: RegistryFormat, schemaId: number): RegistryFraming {
  const header = new Uint8Array(format === 'protobuf' ? 6 : 5);
  new DataView(header.buffer).setUint32(1, schemaId);
  return { format, header };
}

const f64 = new Float64Array(1);
const f64Bytes = new Uint8Array(f64.buffer);
const littleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** A double's 8 bytes, little-endian (Avro's and Protobuf's order). */
function writeDouble(o: Uint8Array, p: number, x: number): number {
  f64[0] = x;
  if (littleEndian) for (let k = 0; k < 8; k++) o[p + k] = f64Bytes[k] as number;
  else for (let k = 0; k < 8; k++) o[p + k] = f64Bytes[7 - k] as number;
  return p + 8;
}

/** An unsigned varint (Protobuf's lengths and tags). */
function writeVarint(o: Uint8Array, p: number, n: number): number {
  while (n >= 0x80) {
    o[p++] = (n & 0x7f) | 0x80;
    n >>>= 7;
  }
  o[p++] = n;
  return p;
}

/** The length prefix of a string of `length` bytes: Avro's zig-zag long, or Protobuf's tag and varint. */
export function writeLength(o: Uint8Array, p: number, format: RegistryFormat, field: number, length: number): number {
  if (format === 'avro') return writeVarint(o, p, length * 2);
  o[p++] = ((field + 1) << 3) | 2;
  return writeVarint(o, p, length);
}

/** A double field: Protobuf's tag first. */
export function writeDoubleField(o: Uint8Array, p: number, format: RegistryFormat, field: number, x: number): number {
  if (format === 'protobuf') o[p++] = ((field + 1) << 3) | 1;
  return writeDouble(o, p, x);
}

/** Bytes a value may need beyond its strings' UTF-8: the header, and per field a 5-byte length or tag and 8 bytes. */
export function registryOverhead(fields: number): number {
  return 6 + 14 * fields;
}

/** The value's fields in the schema's order, read from the zod schema on the general path's first use. */
let valueFieldsOnce: readonly ValueField[] | null = null;

/**
 * The general path's encoder: the validated points' messages in a registry format, laid out as
 * encode.ts lays out JSON (values, then keys, in the scratch buffer the next request overwrites).
 */
export function encodeRegistryPoints(points: readonly TrackPoint[], framing: RegistryFraming): EncodedPoints {
  if (framing.format === 'json-schema') return frameJson(encodePoints(points), framing.header);
  const fields = (valueFieldsOnce ??= valueFields());
  const { format, header } = framing;
  const count = points.length;
  const messages = scratchOffsets(count).subarray(0, 4 * count);
  let p = 0;
  let largestValue = 0;
  let out = scratchBytes(0, 0);
  for (let i = 0; i < count; i++) {
    const point = points[i] as unknown as Record<string, string | number>;
    let room = registryOverhead(fields.length);
    for (const f of fields) if (f.type === 'string') room += 3 * (point[f.name] as string).length;
    out = scratchBytes(p, room);
    const start = p;
    out.set(header, p);
    p += header.length;
    for (let j = 0; j < fields.length; j++) {
      const field = fields[j] as ValueField;
      const value = point[field.name] as string | number;
      if (typeof value === 'number') p = writeDoubleField(out, p, format, j, value);
      else {
        const length = Buffer.byteLength(value);
        p = writeLength(out, p, format, j, length);
        p += out.write(value, p);
      }
    }
    messages[4 * i] = start;
    messages[4 * i + 1] = p;
    if (p - start > largestValue) largestValue = p - start;
  }
  for (let i = 0; i < count; i++) {
    const id = (points[i] as TrackPoint).container_id;
    out = scratchBytes(p, 3 * id.length);
    messages[4 * i + 2] = p;
    p = writeKey(id, p);
    messages[4 * i + 3] = p;
  }
  return { count, data: out.subarray(0, p), messages, bytes: p, largestValue };
}

/** JSON values with the header in front of each (json-schema): the values copied after the JSON messages. */
function frameJson(json: EncodedPoints, header: Uint8Array): EncodedPoints {
  const { count, messages } = json;
  let p = json.data.length;
  let out = scratchBytes(p, count * header.length + p);
  for (let i = 0; i < count; i++) {
    const from = messages[4 * i] as number;
    const to = messages[4 * i + 1] as number;
    out = scratchBytes(p, header.length + to - from);
    messages[4 * i] = p;
    out.set(header, p);
    p += header.length;
    out.copyWithin(p, from, to);
    p += to - from;
    messages[4 * i + 1] = p;
  }
  return { count, data: out.subarray(0, p), messages, bytes: json.bytes + count * header.length, largestValue: json.largestValue + header.length };
}
