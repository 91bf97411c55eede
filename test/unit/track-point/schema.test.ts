import { describe, expect, it } from 'vitest';
import { validatePoints, TrackPointSchema } from '../../../src/track-point/schema.js';
import { MAX_ERROR_DETAILS } from '../../../src/track-point/schema.js';

const base = { container_id: 'MSCU1234567', lat: 51.9, lon: 4.4, timestamp: '2024-05-01T12:00:00Z', speed: 3.5 };
const issuesOf = (point: unknown) => {
  const r = validatePoints([point]);
  return r.ok ? [] : r.details;
};

describe("track point rules (the README's field table)", () => {
  it('accepts a complete point and keeps its values', () => {
    expect(validatePoints([base])).toEqual({ ok: true, points: [base] });
  });

  it.each([
    ['lat', -90],
    ['lat', 90],
    ['lat', 0],
    ['lat', -0],
    ['lon', -180],
    ['lon', 180],
    ['speed', 0],
    ['speed', 1e9],
  ])('accepts the boundary %s = %d', (field, value) => {
    expect(validatePoints([{ ...base, [field]: value }]).ok).toBe(true);
  });

  it.each([
    ['lat', -90.000001, 'must be between -90 and 90'],
    ['lat', 90.000001, 'must be between -90 and 90'],
    ['lon', -180.0001, 'must be between -180 and 180'],
    ['lon', 180.0001, 'must be between -180 and 180'],
    ['speed', -0.0001, 'must be at least 0'],
  ])('rejects %s = %d with "%s"', (field, value, message) => {
    expect(issuesOf({ ...base, [field]: value })).toEqual([{ index: 0, field, message }]);
  });

  it('fills a missing speed with 0 (rule 4)', () => {
    const { speed: _omit, ...noSpeed } = base;
    const r = validatePoints([noSpeed]);
    expect(r.ok && r.points[0]!.speed).toBe(0);
  });

  it.each(['container_id', 'lat', 'lon', 'timestamp'])('rejects a point missing %s (rule 1)', (field) => {
    const point = Object.fromEntries(Object.entries(base).filter(([key]) => key !== field));
    expect(issuesOf(point)).toEqual([{ index: 0, field, message: 'is required' }]);
  });

  it.each([
    ['lat', '51.9', 'must be a number'],
    ['lon', true, 'must be a number'],
    ['lat', null, 'must be a number'],
    ['speed', null, 'must be a number'],
    ['speed', '3', 'must be a number'],
    ['container_id', 42, 'must be a string'],
    ['container_id', null, 'must be a string'],
    ['container_id', '', 'must not be empty'],
    ['container_id', 'x'.repeat(65), 'must be at most 64 characters'],
    ['timestamp', 1714564800, 'must be an RFC 3339 date-time string'],
    ['timestamp', '2024-02-30T12:00:00Z', 'must be an RFC 3339 date-time such as 2024-05-01T12:00:00Z'],
  ])('rejects %s = %j with "%s"', (field, value, message) => {
    expect(issuesOf({ ...base, [field]: value })).toEqual([{ index: 0, field, message }]);
  });

  it('accepts a 64-character container id', () => {
    expect(validatePoints([{ ...base, container_id: 'x'.repeat(64) }]).ok).toBe(true);
  });

  it.each([Infinity, -Infinity, NaN])('rejects the non-finite number %d', (value) => {
    expect(validatePoints([{ ...base, lat: value }]).ok).toBe(false);
  });

  it.each([null, 5, 'point', [], true])('rejects an element that is not an object: %j', (value) => {
    expect(issuesOf(value)).toEqual([{ index: 0, message: 'must be an object' }]);
  });

  it('drops fields it does not know, __proto__ included', () => {
    const parsed = JSON.parse(`[{"container_id":"c","lat":1,"lon":2,"timestamp":"2024-05-01T12:00:00Z","extra":1,"__proto__":{"polluted":true}}]`);
    const r = validatePoints(parsed);
    expect(r.ok && Object.keys(r.points[0]!)).toEqual(['container_id', 'lat', 'lon', 'timestamp', 'speed']);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('reports every invalid point by index and counts points, not issues', () => {
    const r = validatePoints([base, { ...base, lat: 100, lon: 200 }, base, { ...base, speed: -1 }]);
    expect(r).toEqual({
      ok: false,
      invalidPoints: 2,
      details: [
        { index: 1, field: 'lat', message: 'must be between -90 and 90' },
        { index: 1, field: 'lon', message: 'must be between -180 and 180' },
        { index: 3, field: 'speed', message: 'must be at least 0' },
      ],
    });
  });

  it(`lists at most ${MAX_ERROR_DETAILS} details however many points fail`, () => {
    const r = validatePoints(Array.from({ length: 500 }, () => ({ ...base, lat: 1000 })));
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.invalidPoints).toBe(500);
      expect(r.details).toHaveLength(MAX_ERROR_DETAILS);
    }
  });

  it('is the single schema: the type has exactly the five forwarded fields', () => {
    expect(Object.keys(TrackPointSchema.shape).sort()).toEqual(['container_id', 'lat', 'lon', 'speed', 'timestamp']);
  });
});
