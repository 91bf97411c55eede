// The README is the front door: its tables must list every error code and every variable the code has,
// as the code has them.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DEFAULTS, PRODUCER_OPTION_PREFIX } from '../../src/config.js';
import { CATALOGUE, catalogueRow, type CatalogueCode } from '../../src/api/errors.js';

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');

describe('README', () => {
  it.each(Object.keys(CATALOGUE) as CatalogueCode[])('lists error code %s as the catalogue has it', (code) => {
    expect(readme).toContain(catalogueRow(code));
  });

  it('lists no error code the catalogue does not have', () => {
    const rows = readme.split('\n').filter((l) => /^\| `[a-z_]+` \| \d{3} \|/.test(l));
    expect(rows.map((l) => l.split('`')[1]).sort()).toEqual(Object.keys(CATALOGUE).sort());
  });

  it.each(Object.entries(DEFAULTS))('lists %s with its default %s', (variable, value) => {
    expect(readme).toContain(`| \`${variable}\` | \`${value}\` |`);
  });

  it('documents the MQ_OPT_ rule', () => {
    expect(readme).toContain(`| \`${PRODUCER_OPTION_PREFIX}*\` |`);
  });
});
