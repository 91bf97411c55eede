// The repository's root directory, with a trailing slash, wherever this file runs from: support/
// (the tests, from the sources) or dist/support/ (the compiled benchmarks).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const up1 = fileURLToPath(new URL('../', import.meta.url));
export const REPO_ROOT = existsSync(`${up1}package.json`) ? up1 : fileURLToPath(new URL('../../', import.meta.url));
