// The message value's schema in each Schema Registry format, derived from the zod schema as
// openapi.json is: one source of truth for the fields, their order, types and descriptions. The
// checked-in copies (schemas/, `make schemas`) are held to this by test/unit/track-point/registry-schemas.test.ts.
//
// The value is the point as validated: every field present (speed's default filled in), so the
// Avro and Protobuf fields are plain strings and doubles in the zod schema's order, and the wire
// writers (registry-encode.ts) follow that order.
import { z } from 'zod';
import { TrackPointSchema } from './schema.js';

/** The record's name in every format: Avro's namespace.name, Protobuf's package.message. */
export const SCHEMA_NAMESPACE = 'telemetry';
export const SCHEMA_NAME = 'TrackPoint';
export const SCHEMA_FULL_NAME = `${SCHEMA_NAMESPACE}.${SCHEMA_NAME}`;
/** The record's description in every format. */
const SCHEMA_DOC = 'One GPS point of a shipping container.';

export type RegistryFormat = 'avro' | 'protobuf' | 'json-schema';

/** The registry's schemaType of each format (Confluent's REST API). */
export const SCHEMA_TYPE: Readonly<Record<RegistryFormat, 'AVRO' | 'PROTOBUF' | 'JSON'>> = { avro: 'AVRO', protobuf: 'PROTOBUF', 'json-schema': 'JSON' };

/** The checked-in file of each format, under schemas/. */
export const SCHEMA_FILE: Readonly<Record<RegistryFormat, string>> = {
  avro: 'track-point.avsc',
  protobuf: 'track-point.proto',
  'json-schema': 'track-point.schema.json',
};

/** One field of the value, in the schema's order: a string or a double. */
export interface ValueField {
  readonly name: string;
  readonly type: 'string' | 'double';
  readonly description: string;
  /** The value written when the point has none (speed's), or undefined: required. */
  readonly default: number | undefined;
}

/** The value's fields, read from the zod schema: strings and numbers, in its order. */
export function valueFields(schema: z.ZodObject = TrackPointSchema): ValueField[] {
  return Object.entries(schema.shape).map(([name, field]) => {
    const json = z.toJSONSchema(field as z.ZodType, { io: 'output' }) as { type?: string; description?: string; default?: unknown };
    if (json.type !== 'string' && json.type !== 'number')
      throw new Error(`field ${name}: a registry format holds strings and numbers, not ${String(json.type)}`);
    return {
      name,
      type: json.type === 'string' ? 'string' : 'double',
      description: json.description ?? '',
      default: typeof json.default === 'number' ? json.default : undefined,
    };
  });
}

/** The Avro schema (.avsc): a record of the fields, speed with its default so that it may be added to or dropped by a reader. */
export function avroSchema(): string {
  const fields = valueFields().map((f) => ({ name: f.name, type: f.type, doc: f.description, ...(f.default === undefined ? {} : { default: f.default }) }));
  return JSON.stringify({ type: 'record', name: SCHEMA_NAME, namespace: SCHEMA_NAMESPACE, doc: SCHEMA_DOC, fields }, null, 2) + '\n';
}

/** The Protobuf schema (.proto, proto3): one message, field numbers in the schema's order from 1. */
export function protobufSchema(): string {
  const fields = valueFields().map((f, i) => `  // ${f.description}\n  ${f.type} ${f.name} = ${i + 1};`);
  return `syntax = "proto3";\n\npackage ${SCHEMA_NAMESPACE};\n\n// ${SCHEMA_DOC}\nmessage ${SCHEMA_NAME} {\n${fields.join('\n')}\n}\n`;
}

/** The JSON Schema (draft 2020-12) of the value as written: zod's output, every field required. */
export function jsonSchema(): string {
  const schema = z.toJSONSchema(TrackPointSchema, { io: 'output', target: 'draft-2020-12' });
  return JSON.stringify({ ...schema, title: SCHEMA_FULL_NAME, description: SCHEMA_DOC }, null, 2) + '\n';
}

/** The schema text the registry is given for a format. */
export function schemaText(format: RegistryFormat): string {
  return format === 'avro' ? avroSchema() : format === 'protobuf' ? protobufSchema() : jsonSchema();
}
