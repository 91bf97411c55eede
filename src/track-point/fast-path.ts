// The fast path for valid points, derived from the zod schema at start-up.
//
// zod spends most of its time on the machinery around each check (issue lists, contexts, a generic
// loop over check objects): ten times what the same object costs with its types alone.
// Nearly every request in production is valid, so this module reads the schema's own definition
// (types, length and range checks, refinements, defaults) and builds one plain predicate per field.
// A request whose every point passes gets zod's output without zod; any point that does not pass
// sends the whole request through zod, which decides and writes the error details. The schema stays
// the one source of truth: nothing here states a rule, and a rule this module does not know stops the
// service at start-up instead of being skipped. test/unit/track-point/fast-path.test.ts checks, on
// generated input, that it accepts exactly what zod accepts and outputs what zod outputs.
import type { z } from 'zod';

/** A predicate on a string given as its bytes b[from, to), all ASCII: the string is those bytes. */
export type AsciiPredicate = (b: Uint8Array, from: number, to: number) => boolean;

/**
 * One field of the schema as the fast paths read it: its JSON type, its predicate, its default, and
 * for a string field the same predicate on bytes (`acceptsAscii`), when every refinement of the
 * field carries a bytes form as `ascii` (rfc3339.ts); the single pass then makes no string of it.
 */
export interface Field {
  key: string;
  kind: 'string' | 'number';
  accepts: (value: unknown) => boolean;
  acceptsAscii: AsciiPredicate | null;
  absent: { value: unknown } | null;
}

/** Reads one field's schema: its predicate, and the default taken when the field is absent. */
function compileField(key: string, schema: z.core.$ZodType): Field {
  const def = schema._zod.def;
  if (def.type === 'default') {
    const inner = compileField(key, (def as z.core.$ZodDefaultDef).innerType);
    // zod applies a default only to an absent (undefined) value; the value is fixed in this schema.
    return { ...inner, absent: { value: (def as z.core.$ZodDefaultDef).defaultValue } };
  }
  const checks = (def as { checks?: z.core.$ZodCheck[] }).checks ?? [];
  if (def.type === 'number') {
    // Several bounds on one side (.min(0).positive()) all apply: keep the tightest.
    let min = -Infinity;
    let minInclusive = true;
    let max = Infinity;
    let maxInclusive = true;
    const custom: ((value: number) => unknown)[] = [];
    for (const check of checks) {
      const c = check._zod.def;
      if (c.check === 'greater_than') {
        const { value, inclusive } = c as z.core.$ZodCheckGreaterThanDef as { value: number; inclusive: boolean };
        if (value > min || (value === min && !inclusive)) [min, minInclusive] = [value, inclusive];
      } else if (c.check === 'less_than') {
        const { value, inclusive } = c as z.core.$ZodCheckLessThanDef as { value: number; inclusive: boolean };
        if (value < max || (value === max && !inclusive)) [max, maxInclusive] = [value, inclusive];
      } else if (c.check === 'custom') custom.push(refinement(key, c));
      else throw unknown(key, `check ${c.check}`);
    }
    // zod's number rejects NaN and ±Infinity (JSON.parse turns 1e400 into Infinity).
    const inRange = (v: unknown): v is number =>
      typeof v === 'number' && Number.isFinite(v) && (minInclusive ? v >= min : v > min) && (maxInclusive ? v <= max : v < max);
    return { key, kind: 'number', absent: null, accepts: withCustom(inRange, custom), acceptsAscii: null };
  }
  if (def.type === 'string') {
    let minLength = 0;
    let maxLength = Infinity;
    const custom: ((value: string) => unknown)[] = [];
    for (const check of checks) {
      const c = check._zod.def;
      if (c.check === 'min_length') minLength = Math.max(minLength, (c as z.core.$ZodCheckMinLengthDef).minimum);
      else if (c.check === 'max_length') maxLength = Math.min(maxLength, (c as z.core.$ZodCheckMaxLengthDef).maximum);
      else if (c.check === 'custom') custom.push(refinement(key, c));
      else throw unknown(key, `check ${c.check}`);
    }
    const inLength = (v: unknown): v is string => typeof v === 'string' && v.length >= minLength && v.length <= maxLength;
    return { key, kind: 'string', absent: null, accepts: withCustom(inLength, custom), acceptsAscii: asciiForm(minLength, maxLength, custom) };
  }
  throw unknown(key, `type ${def.type}`);
}

/**
 * A .refine(fn) check's fn. Other custom checks (.check(), .superRefine()) work on zod's internal
 * payload instead of the value: unknown here.
 */
function refinement<V>(key: string, check: z.core.$ZodCheckDef): (value: V) => unknown {
  const fn = (check as { fn?: unknown }).fn;
  if (typeof fn !== 'function') throw unknown(key, 'a custom check other than .refine()');
  return fn as (value: V) => unknown;
}

/** The type's own test, then the refinements: one passes here only when it returns true (else zod decides). */
function withCustom<V>(test: (v: unknown) => v is V, custom: ((value: V) => unknown)[]): (v: unknown) => boolean {
  // Specialized by count: a closure over an array and every() cost more than the checks themselves.
  const [first, ...rest] = custom;
  if (first === undefined) return test;
  if (rest.length === 0) return (v) => test(v) && first(v) === true;
  return (v) => test(v) && custom.every((fn) => fn(v) === true);
}

/** The string field's predicate on ASCII bytes, or null when a refinement has no bytes form. */
function asciiForm(minLength: number, maxLength: number, custom: ((value: string) => unknown)[]): AsciiPredicate | null {
  const forms = custom.map((fn) => (fn as { ascii?: unknown }).ascii);
  if (!forms.every((form): form is AsciiPredicate => typeof form === 'function')) return null;
  // An ASCII string has as many characters as bytes.
  const [first, ...rest] = forms;
  if (first === undefined) return (_b, from, to) => to - from >= minLength && to - from <= maxLength;
  if (rest.length === 0) return (b, from, to) => to - from >= minLength && to - from <= maxLength && first(b, from, to);
  return (b, from, to) => to - from >= minLength && to - from <= maxLength && forms.every((form) => form(b, from, to));
}

function unknown(key: string, what: string): Error {
  return new Error(
    `track point field ${key}: the fast path (src/track-point/fast-path.ts) does not know ${what}; teach it there before using it in the schema`,
  );
}

/**
 * Builds, from an object schema of strings and numbers, a function that returns zod's output for an
 * array whose every element passes, or null as soon as one does not (zod then decides).
 *
 * Generated code by default, as zod generates its own object parser: with the keys written out,
 * property reads and the output's object literal stay monomorphic (64–92 ns per point against
 * 216–338 for the interpreted loop below, measured). `generate: false`, or a process that forbids
 * code generation (--disallow-code-generation-from-strings), takes the interpreted loop.
 */
export function compileFastPath<T>(schema: z.ZodObject, options: { generate: boolean } = { generate: true }): (input: readonly unknown[]) => T[] | null {
  const fields = compileFields(schema);
  if (options.generate) {
    try {
      return generated<T>(fields);
    } catch (err) {
      if (!(err instanceof EvalError)) throw err;
    }
  }
  return interpreted<T>(fields);
}

/** The fields of an object schema of strings and numbers, in the schema's order (zod's output order). */
export function compileFields(schema: z.ZodObject): Field[] {
  const def = schema._zod.def;
  if (def.catchall !== undefined) throw unknown('(any)', 'a catchall');
  const fields = Object.entries(def.shape).map(([key, field]) => compileField(key, field));
  for (const field of fields) {
    // An object literal's "__proto__" sets the prototype; a shared object default could be mutated.
    if (field.key === '__proto__') throw unknown(field.key, 'the key __proto__');
    if (field.absent !== null && typeof field.absent.value === 'object' && field.absent.value !== null) throw unknown(field.key, 'a default that is an object');
  }
  return fields;
}

function generated<T>(fields: Field[]): (input: readonly unknown[]) => T[] | null {
  // Keys enter the source only through JSON.stringify; predicates and defaults are parameters.
  const reads = fields.map((f, j) => {
    const accepted = f.absent === null ? `accepts${j}(v${j})` : `v${j} === undefined || accepts${j}(v${j})`;
    return `    const v${j} = point[${JSON.stringify(f.key)}];\n    if (!(${accepted})) return null;`;
  });
  const output = fields.map((f, j) => `${JSON.stringify(f.key)}: ${f.absent === null ? `v${j}` : `v${j} === undefined ? absent${j} : v${j}`}`);
  const source = [
    'return function allValid(input) {',
    '  const out = new Array(input.length);',
    '  for (let i = 0; i < input.length; i++) {',
    '    const point = input[i];',
    "    if (typeof point !== 'object' || point === null || Array.isArray(point)) return null;",
    ...reads,
    `    out[i] = { ${output.join(', ')} };`,
    '  }',
    '  return out;',
    '};',
  ].join('\n');
  const params = [...fields.map((_, j) => `accepts${j}`), ...fields.map((_, j) => `absent${j}`)];
  const make = new Function(...params, source) as (...args: unknown[]) => (input: readonly unknown[]) => T[] | null;
  return make(...fields.map((f) => f.accepts), ...fields.map((f) => f.absent?.value));
}

function interpreted<T>(fields: Field[]): (input: readonly unknown[]) => T[] | null {
  return (input) => {
    const out = new Array<T>(input.length);
    for (let i = 0; i < input.length; i++) {
      const point = input[i];
      if (typeof point !== 'object' || point === null || Array.isArray(point)) return null;
      // The output has the schema's keys only, in its order, as zod's has (unknown keys dropped).
      const valid: Record<string, unknown> = {};
      for (const field of fields) {
        const value = (point as Record<string, unknown>)[field.key];
        if (value === undefined && field.absent !== null) valid[field.key] = field.absent.value;
        else if (field.accepts(value)) valid[field.key] = value;
        else return null;
      }
      out[i] = valid as T;
    }
    return out;
  };
}
