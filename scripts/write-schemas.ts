// `make schemas`: writes schemas/ (the value's Avro, Protobuf and JSON Schema) from the zod schema.
// The checked-in files are compared with this output by test/unit/track-point/registry-schemas.test.ts.
import { mkdirSync, writeFileSync } from 'node:fs';
import { SCHEMA_FILE, schemaText, type RegistryFormat } from '../src/track-point/registry-schemas.js';

const dir = new URL('../../schemas/', import.meta.url);
mkdirSync(dir, { recursive: true });
for (const format of Object.keys(SCHEMA_FILE) as RegistryFormat[]) {
  const path = new URL(SCHEMA_FILE[format], dir);
  writeFileSync(path, schemaText(format));
  console.log(`write-schemas: wrote ${path.pathname}`);
}
