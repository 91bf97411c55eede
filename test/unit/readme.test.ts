// The README is the front door: its tables must list every error code and every variable the code has.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { DEFAULTS, PRODUCER_OPTION_PREFIX } from '../../src/config.js';
import { ERROR_STATUS } from '../../src/errors.js';

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');

describe('README', () => {
  it.each(Object.entries(ERROR_STATUS))('lists error code %s with status %d', (code, status) => {
    expect(readme).toContain(`| \`${code}\` | ${status} |`);
  });

  it.each(Object.entries(DEFAULTS))('lists %s with its default %s', (variable, value) => {
    expect(readme).toContain(`| \`${variable}\` | \`${value}\` |`);
  });

  it('documents the MQ_OPT_ rule', () => {
    expect(readme).toContain(`| \`${PRODUCER_OPTION_PREFIX}*\` |`);
  });
});
