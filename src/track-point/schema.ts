// The track point: its type, its validation rules and its error messages, defined once here.
// The rules are the README's table of fields (the API contract). The OpenAPI document is generated
// from this schema too, so the API description cannot drift from what the validator does.
import { z } from 'zod';
import { compileFastPath } from './fast-path.js';
import { isRfc3339DateTime } from './rfc3339.js';

export const CONTAINER_ID_MAX_LENGTH = 64;

/** One rejected field of one point. `field` is absent when the element itself is wrong (not an object). */
export interface PointIssue {
  index: number;
  field?: string;
  message: string;
}

/** At most this many entries in `details`: a 10,000-point garbage body must not produce a 2 MB answer. */
export const MAX_ERROR_DETAILS = 100;

/** "is required" when the field is absent, otherwise the type message. */
const typeError = (expected: string) => (issue: { input: unknown }) => (issue.input === undefined ? 'is required' : expected);

const between = (min: number, max: number) => `must be between ${min} and ${max}`;

export const TrackPointSchema = z.object(
  {
    container_id: z
      .string({ error: typeError('must be a string') })
      .min(1, 'must not be empty')
      .max(CONTAINER_ID_MAX_LENGTH, `must be at most ${CONTAINER_ID_MAX_LENGTH} characters`)
      .meta({ description: 'Identifier of the shipping container; the Kafka message key.' }),
    lat: z
      .number({ error: typeError('must be a number') })
      .min(-90, between(-90, 90))
      .max(90, between(-90, 90))
      .meta({ description: 'Latitude in degrees.' }),
    lon: z
      .number({ error: typeError('must be a number') })
      .min(-180, between(-180, 180))
      .max(180, between(-180, 180))
      .meta({ description: 'Longitude in degrees.' }),
    timestamp: z
      .string({ error: typeError('must be an RFC 3339 date-time string') })
      .refine(isRfc3339DateTime, 'must be an RFC 3339 date-time such as 2024-05-01T12:00:00Z')
      .meta({ format: 'date-time', description: 'Time of the GPS measurement, RFC 3339 section 5.6; forwarded exactly as sent.' }),
    speed: z
      .number({ error: 'must be a number' })
      .min(0, 'must be at least 0')
      .default(0)
      .meta({ description: 'Speed in metres per second; 0 when absent. null is rejected.' }),
  },
  { error: 'must be an object' },
);

/** A validated point: `speed` filled in, unknown fields dropped. */
export type TrackPoint = z.output<typeof TrackPointSchema>;

const TrackPointsSchema = z.array(TrackPointSchema);
/** zod's answer for requests whose points are all valid, without zod's per-check cost (fast-path.ts). */
const allValid = compileFastPath<TrackPoint>(TrackPointSchema);

export type ValidationResult = { ok: true; points: TrackPoint[] } | { ok: false; invalidPoints: number; details: PointIssue[] };

/** Validates a parsed JSON array. The caller has checked that it is an array and within MAX_POINTS. */
export function validatePoints(input: unknown[]): ValidationResult {
  const points = allValid(input);
  if (points !== null) return { ok: true, points };
  const result = parseOrIssues(TrackPointsSchema, input);
  if (!('issues' in result)) return { ok: true, points: result.value };
  const invalid = new InvalidPoints();
  for (const issue of result.issues) {
    const field = issue.path[1];
    invalid.add(issue.path[0] as number, field === undefined ? undefined : String(field), issue.message);
  }
  return invalid.result();
}

/** A field's value as the single pass read it from the body, when the schema refuses it (undefined: absent). */
export interface RefusedValue {
  index: number;
  field: string;
  value: unknown;
}

/**
 * The same answer as validatePoints, for points that the single pass (single-pass.ts) read whole and
 * found some fields of refused: zod runs on those fields' values alone, so the messages are its own.
 * `refused` in the order zod reports: by point, then by field in the schema's order. The single pass
 * keeps to the schema's fields, a point being an object of them: zod's object schema gives a field's
 * issues from that field's schema alone, in the schema's order of fields.
 * null when zod accepts one of the values after all (the fast path's predicates and zod would
 * disagree: a bug, the general path then decides).
 */
export function refusedValues(schema: z.ZodObject, refused: readonly RefusedValue[]): (ValidationResult & { ok: false }) | null {
  const invalid = new InvalidPoints();
  for (const { index, field, value } of refused) {
    const result = parseOrIssues(schema.shape[field] as z.ZodType, value);
    if (!('issues' in result)) return null;
    for (const issue of result.issues) invalid.add(index, field, issue.message);
  }
  return invalid.result();
}

/** The details of a refusal, gathered issue by issue: at most MAX_ERROR_DETAILS, every invalid point counted. */
class InvalidPoints {
  private readonly details: PointIssue[] = [];
  private points = 0;
  private last = -1;

  add(index: number, field: string | undefined, message: string): void {
    // Issues come point by point, in order: a new index is a new invalid point.
    if (index !== this.last) {
      this.points++;
      this.last = index;
    }
    if (this.details.length < MAX_ERROR_DETAILS) this.details.push(field === undefined ? { index, message } : { index, field, message });
  }

  result(): ValidationResult & { ok: false } {
    return { ok: false, invalidPoints: this.points, details: this.details };
  }
}

/**
 * What zod's safeParse gives, without its failure object: that result is a literal with a getter, a
 * hidden class of its own on every call, and under a flood of invalid points (thousands a second)
 * the worker's young-generation collections grew long enough to raise the valid requests' p99
 * (`make bench-refused`). The same run and
 * the same finalized issues (messages included) as zod/v4/core/parse.js, minus that object and
 * the ZodError around them.
 */
function parseOrIssues<T extends z.ZodType>(schema: T, value: unknown): { value: z.output<T> } | { issues: z.core.$ZodIssue[] } {
  const ctx = { async: false } as const;
  const result = schema._zod.run({ value, issues: [] }, ctx);
  if (result instanceof Promise) throw new Error('the track-point schema has an asynchronous rule: validatePoints cannot run it');
  if (result.issues.length === 0) return { value: result.value as z.output<T> };
  const config = z.config();
  return { issues: result.issues.map((issue) => z.core.util.finalizeIssue(issue, ctx, config)) };
}
