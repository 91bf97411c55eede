// What the single pass (single-pass.ts) knows of the schema's fields, worked out once at start-up:
// their names' bytes, their predicates, and the bytes JSON.stringify writes around their values.
import type { z } from 'zod';
import { compileFields } from './fast-path.js';

export const bytesOf = (text: string) => Uint8Array.from(Buffer.from(text, 'utf8'));

/** Number::toString writes at most 25 characters (-1.2345678901234567e-300), and 1e20 takes 21 for 4. */
const NUMBER_TEXT = 25;

/** The fields of `schema`, in its order; keyField names the string field whose text is the message key. */
export function fieldLayout(schema: z.ZodObject, keyField: string) {
  const fields = compileFields(schema);
  const count = fields.length;
  if (count > 30) throw new Error(`the single pass (src/track-point/single-pass.ts) keeps a bit per field: ${count} fields is too many`);
  const keyIndex = fields.findIndex((f) => f.key === keyField);
  if (keyIndex < 0 || fields[keyIndex]?.kind !== 'string') throw new Error(`the message key ${keyField} is not a string field of the schema`);

  const keys = fields.map((f) => f.key);
  const names = keys.map(bytesOf);
  const isString = fields.map((f) => f.kind === 'string');
  const accepts = fields.map((f) => f.accepts);
  // A string's bytes are printable ASCII without escapes here (plainStringEnd), so a predicate on
  // bytes sees exactly the string and none is made.
  const acceptsAscii = fields.map((f) => f.acceptsAscii);
  // What JSON.stringify writes before each value of zod's output, whose keys are in the schema's order.
  const prefixes = fields.map((f, j) => bytesOf(`${j === 0 ? '{' : ','}${JSON.stringify(f.key)}:${f.kind === 'string' ? '"' : ''}`));
  const defaults = fields.map((f) => (f.absent === null ? null : bytesOf(JSON.stringify(f.absent.value))));
  // The same defaults as values, for the registry formats' writers.
  const defaultValues = fields.map((f) => (f.absent === null ? null : f.absent.value));
  let required = 0;
  fields.forEach((f, j) => {
    if (f.absent === null) required |= 1 << j;
  });
  const all = (1 << count) - 1;
  // A value holds at most the point's own bytes, these, and its numbers as Number::toString writes them.
  const fixedBytes = prefixes.reduce((n, p) => n + p.length, 0) + defaults.reduce((n, d) => n + (d?.length ?? 0), 0) + (NUMBER_TEXT + 2) * count;

  return { count, keyIndex, keys, names, isString, accepts, acceptsAscii, prefixes, defaults, defaultValues, required, all, fixedBytes };
}
