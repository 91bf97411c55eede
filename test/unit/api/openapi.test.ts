// The OpenAPI document is generated from the zod schema: the checked-in copy must be current, and
// the document's schema must agree with the validator on real examples.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../../src/config.js';
import { buildOpenApi } from '../../../src/api/openapi.js';
import { validatePoints } from '../../../src/track-point/schema.js';

const doc = buildOpenApi(loadConfig({}));

describe('openapi.json', () => {
  it('is the generated document (run `make openapi` after changing the schema)', () => {
    expect(JSON.parse(readFileSync(new URL('../../../openapi.json', import.meta.url), 'utf8'))).toEqual(doc);
  });

  it('describes the same fields, requirements and ranges as the validator enforces', () => {
    const schema = doc.components.schemas.TrackPoint as {
      required: string[];
      properties: Record<string, { minimum?: number; maximum?: number; maxLength?: number; minLength?: number }>;
    };
    const base = { container_id: 'c', lat: 0, lon: 0, timestamp: '2024-05-01T12:00:00Z' };
    for (const field of Object.keys(schema.properties)) {
      const required = schema.required.includes(field);
      const without = Object.fromEntries(Object.entries(base).filter(([key]) => key !== field));
      expect(validatePoints([without]).ok, `${field} required=${required}`).toBe(!required);
      const { minimum, maximum, maxLength } = schema.properties[field]!;
      if (minimum !== undefined) {
        expect(validatePoints([{ ...base, [field]: minimum }]).ok).toBe(true);
        expect(validatePoints([{ ...base, [field]: minimum - 1e-9 }]).ok).toBe(false);
      }
      if (maximum !== undefined) {
        expect(validatePoints([{ ...base, [field]: maximum }]).ok).toBe(true);
        expect(validatePoints([{ ...base, [field]: maximum + 1e-9 }]).ok).toBe(false);
      }
      if (maxLength !== undefined) {
        expect(validatePoints([{ ...base, [field]: 'x'.repeat(maxLength) }]).ok).toBe(true);
        expect(validatePoints([{ ...base, [field]: 'x'.repeat(maxLength + 1) }]).ok).toBe(false);
      }
    }
  });
});
