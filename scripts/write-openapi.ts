// `make openapi`: writes openapi.json from the zod schema with the default limits.
// The checked-in file is compared with this output by test/unit/openapi.test.ts.
import { writeFileSync } from 'node:fs';
import { loadConfig } from '../src/config.js';
import { buildOpenApi } from '../src/api/openapi.js';

const path = new URL('../../openapi.json', import.meta.url);
writeFileSync(path, JSON.stringify(buildOpenApi(loadConfig({})), null, 2) + '\n');
console.log(`write-openapi: wrote ${path.pathname}`);
