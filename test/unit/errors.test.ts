// The error catalogue is the authority: every answer's status, the metrics' reasons and the OpenAPI
// error responses come from it.
import { describe, expect, it } from 'vitest';
import { codesWithStatus, ERROR_STATUS, errorAnswer, TRACK_REJECTIONS, type ErrorCode } from '../../src/errors.js';
import { refuse } from '../../src/http/track-body.js';
import { STATUSES, TrackTally } from '../../src/metrics.js';
import { buildOpenApi } from '../../src/openapi.js';

describe('the error catalogue', () => {
  it.each(Object.entries(ERROR_STATUS) as [ErrorCode, number][])('answers %s with %d and a JSON body naming the code', (code, status) => {
    const answer = errorAnswer(code, 'why');
    expect([answer.status, answer.code, JSON.parse(answer.body)]).toEqual([status, code, { error: code, message: 'why' }]);
  });

  it('a refused /track request takes its status from the code and counts under it', () => {
    for (const code of TRACK_REJECTIONS) {
      const outcome = refuse(code, 'no', 3);
      expect([outcome.status, outcome.reason, outcome.points]).toEqual([ERROR_STATUS[code], code, 3]);
    }
    expect(Object.keys(new TrackTally().rejected).sort()).toEqual([...TRACK_REJECTIONS].sort());
  });

  it('the request metrics know every status the catalogue answers with', () => {
    for (const status of Object.values(ERROR_STATUS)) expect(STATUSES).toContain(status);
  });

  it('each error response of POST /track in the OpenAPI document names exactly the codes of its status', () => {
    const responses = buildOpenApi({ maxPoints: 10, maxBodyBytes: 100 }).paths['/track'].post.responses as Record<string, { description: string }>;
    for (const [status, response] of Object.entries(responses)) {
      if (Number(status) < 400) continue;
      expect(response.description.startsWith(`${codesWithStatus(Number(status)).join(' or ')}: `), status).toBe(true);
    }
    expect(codesWithStatus(500)).toEqual(['broker_unavailable', 'delivery_failed']);
  });
});
