// The error catalogue is the authority: every answer's status and Retry-After, the metrics' reasons,
// the OpenAPI error responses, and the gateway's own refusals (deploy/gateway) come from it or are
// held to it here.
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CATALOGUE, ERROR_CODES, errorAnswer, PRODUCER_REFUSALS, type CatalogueCode } from '../../../src/api/errors.js';
import { createWorkerMetrics } from '../../../src/metrics/metrics.js';
import { buildOpenApi } from '../../../src/api/openapi.js';

const read = (path: string) => readFileSync(new URL(`../../../${path}`, import.meta.url), 'utf8');

interface GatewayAnswer {
  file: string;
  /** Lua only: an error_page target of the REFUSALS table, or a direct json_refusal() call. */
  via?: 'error_page' | 'direct';
  code: string;
  status: number;
  retryAfter?: number;
}

/**
 * The refusals the nginx gateway's Lua writes: its REFUSALS table (error_page targets, each status
 * reached through nginx.conf's error_page lines) and its direct json_refusal(...) calls.
 */
function luaAnswers(): GatewayAnswer[] {
  const file = 'deploy/gateway/lua/track_gateway.lua';
  const lua = read(file);
  const answers: GatewayAnswer[] = [];
  for (const m of lua.matchAll(/\["(\d{3})"\] = \{ "([a-z_]+)", (?:"[^"]*"|function\(\)[^}]*end)(?:, "(\d+)")? \}/g)) {
    answers.push({ file, via: 'error_page', status: Number(m[1]), code: m[2]!, ...(m[3] === undefined ? {} : { retryAfter: Number(m[3]) }) });
  }
  for (const m of lua.matchAll(/json_refusal\((\d{3}), "([a-z_]+)",[^\n]*?(?:, "(\d+)"\))?\n/g)) {
    answers.push({ file, via: 'direct', status: Number(m[1]), code: m[2]!, ...(m[3] === undefined ? {} : { retryAfter: Number(m[3]) }) });
  }
  return answers;
}

/** HAProxy's http-error and http-request return lines that answer in the error shape. */
function haproxyAnswers(): GatewayAnswer[] {
  const file = 'deploy/gateway/haproxy.cfg';
  const answers: GatewayAnswer[] = [];
  for (const m of read(file).matchAll(/^\s*http-(?:error|request return) status (\d{3}) .*?'\{"error":"([a-z_]+)".*?'(?: hdr Retry-After (\d+))?/gm)) {
    answers.push({ file, status: Number(m[1]), code: m[2]!, ...(m[3] === undefined ? {} : { retryAfter: Number(m[3]) }) });
  }
  return answers;
}

describe('the error catalogue', () => {
  it.each(ERROR_CODES)('answers %s with its status, its Retry-After and a JSON body naming the code', (code) => {
    const answer = errorAnswer(code, 'why');
    const entry = CATALOGUE[code];
    expect([answer.status, answer.retryAfter, JSON.parse(answer.body)]).toEqual([
      entry.status,
      'retryAfter' in entry ? entry.retryAfter : undefined,
      { error: code, message: 'why' },
    ]);
  });

  it('writes a body byte for byte as JSON.stringify writes the answer, details and any text included', () => {
    const text = fc.string({ unit: 'binary', maxLength: 40 }); // lone surrogates, quotes, controls
    const issue = fc.record({ index: fc.nat(), field: text, message: text }, { requiredKeys: ['index', 'message'] });
    fc.assert(
      fc.property(fc.constantFrom(...ERROR_CODES), text, fc.option(fc.array(issue, { maxLength: 4 }), { nil: undefined }), (code, message, details) => {
        const expected = JSON.stringify(details === undefined ? { error: code, message } : { error: code, message, details });
        expect(errorAnswer(code, message, details).body).toBe(expected);
      }),
      { numRuns: 5_000 },
    );
  });

  it('answers every 5xx of the service with a Retry-After, and a refusal of the producer with 500 (the spec: a failed broker write is 500)', () => {
    for (const code of ERROR_CODES) if (CATALOGUE[code].status >= 500) expect(errorAnswer(code, '').retryAfter, code).toBe(1);
    for (const refusal of PRODUCER_REFUSALS) expect(CATALOGUE[refusal].status, refusal).toBe(500);
  });

  it('gives each producer refusal a reason of its own in the refusal metrics', async () => {
    const metrics = createWorkerMetrics('t');
    for (const refusal of PRODUCER_REFUSALS) metrics.track.tally.refused[refusal] += 1;
    const text = await metrics.registry.metrics();
    for (const refusal of PRODUCER_REFUSALS) expect(text).toContain(`ingest_requests_rejected_total{reason="${refusal}"} 1`);
  });

  it('holds every refusal the gateways answer to the catalogue: code, status, Retry-After', () => {
    const answers = [...luaAnswers(), ...haproxyAnswers()];
    // The parsers above found what the files hold (a change of their shape must not empty this test).
    expect(answers.filter((a) => a.file.endsWith('.lua')).length).toBeGreaterThanOrEqual(10);
    expect(answers.filter((a) => a.file.endsWith('.cfg')).length).toBeGreaterThanOrEqual(9);
    for (const a of answers) {
      const entry: { status: number; by: string; retryAfter?: number } | undefined = CATALOGUE[a.code as CatalogueCode];
      expect(entry, `${a.file}: ${a.code} is not in the catalogue`).toBeDefined();
      expect([a.status, a.retryAfter], `${a.file}: ${a.code}`).toEqual([entry!.status, entry!.retryAfter]);
      expect(entry!.by, `${a.file}: ${a.code}`).not.toBe('service');
    }
    // And the catalogue names no gateway code that no gateway answers.
    const answered = new Set(answers.map((a) => a.code));
    for (const code of Object.keys(CATALOGUE) as CatalogueCode[]) {
      if (CATALOGUE[code].by !== 'service') expect(answered.has(code), `${code} is answered by no gateway file`).toBe(true);
    }
  });

  it("reaches each status of the nginx gateway's refusals through an error_page", () => {
    const conf = read('deploy/gateway/nginx.conf.template');
    const targets = new Set([...conf.matchAll(/error_page \d{3}(?: =\d{3})? \/_gateway\/(?:\$\{idem_keyed\})?(\d{3});/g)].map((m) => Number(m[1])));
    const table = luaAnswers().filter((a) => a.via === 'error_page');
    expect(table.length).toBeGreaterThan(5);
    for (const a of table) expect(targets.has(a.status), `${a.code} (${a.status})`).toBe(true);
  });

  it('lists in the OpenAPI document every code of the service under the status it is answered with', () => {
    const responses = buildOpenApi({ maxPoints: 10, maxBodyBytes: 100 }).paths['/track'].post.responses as Record<string, { description: string }>;
    for (const code of ERROR_CODES) {
      if (code === 'not_found') continue; // not an answer of POST /track
      expect(responses[String(CATALOGUE[code].status)]?.description, code).toContain(code);
    }
  });
});
