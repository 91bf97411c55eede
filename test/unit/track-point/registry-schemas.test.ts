// The registry schemas (schemas/) are derived from the zod schema: the checked-in copies must be
// current, and each must hold the fields the service writes, in its order and with its types; the
// zod schema gaining a field fails here until `make schemas` is run.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { SCHEMA_FILE, schemaText, valueFields, type RegistryFormat } from '../../../src/track-point/registry-schemas.js';
import { TrackPointSchema, validatePoints } from '../../../src/track-point/schema.js';

const checkedIn = (format: RegistryFormat) => readFileSync(new URL(`../../../schemas/${SCHEMA_FILE[format]}`, import.meta.url), 'utf8');
/** A validated point: every field the service writes, with its value's type. */
const validated = (() => {
  const result = validatePoints([{ container_id: 'MSKU1234567', lat: 51.9, lon: 4.4, timestamp: '2024-05-01T12:00:00Z' }]);
  if (!result.ok) throw new Error('the example point is refused');
  return result.points[0] as Record<string, unknown>;
})();

describe('the registry schemas', () => {
  it.each(Object.keys(SCHEMA_FILE) as RegistryFormat[])(
    'schemas/ holds the generated %s schema (run `make schemas` after changing the zod schema)',
    (format) => {
      expect(checkedIn(format)).toBe(schemaText(format));
    },
  );

  it("hold the zod schema's fields in its order, a string as a string and a number as a double, every one in every value", () => {
    const fields = valueFields();
    expect(fields.map((f) => f.name)).toEqual(Object.keys(TrackPointSchema.shape));
    expect(fields.map((f) => f.name)).toEqual(Object.keys(validated));
    for (const f of fields) expect(f.type, f.name).toBe(typeof validated[f.name] === 'string' ? 'string' : 'double');

    const avro = JSON.parse(checkedIn('avro')) as { fields: { name: string; type: string; default?: number }[] };
    expect(avro.fields.map((f) => [f.name, f.type])).toEqual(fields.map((f) => [f.name, f.type]));
    // A field that zod fills in when absent has the same default for Avro readers.
    const speed = avro.fields.find((f) => f.name === 'speed');
    expect(speed?.default).toBe(validated.speed);

    const proto = [...checkedIn('protobuf').matchAll(/^\s+(string|double) (\w+) = (\d+);$/gm)].map((m) => [m[2], m[1], Number(m[3])]);
    expect(proto).toEqual(fields.map((f, i) => [f.name, f.type, i + 1]));

    const json = JSON.parse(checkedIn('json-schema')) as { required: string[]; properties: Record<string, { type: string }>; additionalProperties: boolean };
    expect(json.required).toEqual(Object.keys(validated));
    expect(Object.entries(json.properties).map(([name, p]) => [name, p.type])).toEqual(fields.map((f) => [f.name, f.type === 'double' ? 'number' : 'string']));
    expect(json.additionalProperties).toBe(false);
  });
});
