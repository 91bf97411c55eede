// The single pass for bodies of valid points: from the request's bytes to the Kafka messages without
// JSON.parse, without a JavaScript object per point, and without turning numbers into doubles and
// back into text. Why: at 100 points per request, parsing, validating and encoding cost as much CPU
// per point as librdkafka's threads (`make bench-floor`), most of it building objects that live for
// one request. A message's value is the point as JSON.stringify writes zod's output (encode.ts).
//
// It takes a JSON array of objects whose known fields hold printable-ASCII strings without escapes,
// and numbers, whose other fields hold scalars, each field at most once. An object written exactly as
// its message value (readAsWritten) is its value as it stands: produceBatch gets offsets into the
// body, and nothing is copied. Any other is written field by field. A body whose points are not all
// valid is refused here, zod run on the refused values alone (schema.ts, refusedValues): a bad
// firmware release sends thousands a second. Anything else (an escape, non-ASCII text, a nested
// value, a duplicate key, an empty array, more than MAX_POINTS) returns null for the general path:
// UTF-8 check, JSON.parse, the schema, encode.ts.
//
// The rules are the schema's (fast-path.ts's predicates). single-pass.test.ts checks on generated
// bodies that what this takes, the general path takes with the same messages byte for byte, and what
// this refuses, it refuses with the same details. The characters and scanners are this module's
// own: imported into its loops, they slow it down (`make bench-floor`, row "single pass").
import type { z } from 'zod';
import { scratchBytes, scratchOffsets, type EncodedPoints } from './encode.js';
import { fieldLayout } from './field-layout.js';
import { compileReadAsWritten } from './read-as-written.js';
import { registryOverhead, writeDoubleField, writeLength, type RegistryFraming } from './registry-encode.js';
import type { RegistryFormat } from './registry-schemas.js';
import { skipScalar } from './skip-scalar.js';
import { refusedValues, TrackPointSchema, type RefusedValue, type TrackPoint, type ValidationResult } from './schema.js';

/** A body read whole whose points are not all valid: validatePoints' answer, and the points of the body. */
export type RefusedPoints = ValidationResult & { ok: false; count: number };

const TAB = 9;
const LF = 10;
const CR = 13;
const SPACE = 32;
const QUOTE = 34;
const COMMA = 44;
const MINUS = 45;
const DOT = 46;
const ZERO = 48;
const NINE = 57;
const COLON = 58;
const OPEN_ARRAY = 91;
const BACKSLASH = 92;
const CLOSE_ARRAY = 93;
const OPEN_OBJECT = 123;
const CLOSE_OBJECT = 125;

/**
 * Significant digits of a plain number whose double is known from its digits alone (readNumber
 * guesses beyond): two decimals of at most 15 digits are never the same double (DBL_DIG), so such a
 * decimal, trailing zeros dropped, is what Number::toString writes for it when 1e-6 ≤ |x| < 1e21, and
 * its digits r < 10^15 over 10^k (both exact doubles) round correctly to the double JSON.parse gives.
 */
const MAX_DIGITS = 15;
/** Zeros after the point before the first significant digit: 0.000001 is written so, 0.0000001 as 1e-7. */
const MAX_LEADING_ZEROS = 5;
/** The exact powers of ten, 10^0 to 10^22 (text to double is correctly rounded). */
const POW10 = Float64Array.from({ length: 23 }, (_, k) => Number(`1e${k}`));

/** Whether b[from, to) is text, byte for byte (text being ASCII). */
function isWrittenAs(text: string, b: Uint8Array, from: number, to: number): boolean {
  if (text.length !== to - from) return false;
  for (let k = 0; k < text.length; k++) if (text.charCodeAt(k) !== b[from + k]) return false;
  return true;
}

function skipWhitespace(b: Uint8Array, i: number): number {
  for (;;) {
    const c = b[i];
    if (c !== SPACE && c !== LF && c !== CR && c !== TAB) return i;
    i++;
  }
}

/** The end of a string of printable ASCII without escapes that starts after the quote at i - 1, or -1. */
function plainStringEnd(b: Uint8Array, i: number): number {
  for (;;) {
    const c = b[i];
    if (c === QUOTE) return i;
    // undefined (past the end) fails both comparisons too.
    if (!(c !== undefined && c >= SPACE && c <= 126 && c !== BACKSLASH)) return -1;
    i++;
  }
}

function isDigit(c: number | undefined): boolean {
  return c !== undefined && c >= ZERO && c <= NINE;
}

/**
 * Compiles the single pass for an object schema of strings and numbers, keyed by the string field
 * keyField. `format`: the values in that Schema Registry format (registry-encode.ts), each call given
 * the framing (its schema id) to write; else JSON.
 */
export function compileSinglePass(
  schema: z.ZodObject,
  keyField: string,
  options: { generate: boolean; format?: RegistryFormat } = { generate: true },
): (body: Uint8Array, maxPoints: number, framing?: RegistryFraming) => EncodedPoints | RefusedPoints | null {
  const { count, keyIndex, keys, names, isString, accepts, acceptsAscii, prefixes, defaults, defaultValues, required, all, fixedBytes } = fieldLayout(
    schema,
    keyField,
  );
  const format = options.format ?? null;

  // Where each field of the current point sits in the body. A string: [start, end). A number: its
  // sign, integer digits [start, end) ("0" as an empty range), and `decimals` significant decimals
  // from decimalStart (trailing zeros dropped): zero is an empty range and no decimal.
  const start = new Uint32Array(count);
  const end = new Uint32Array(count);
  const negative = new Uint8Array(count);
  const decimalStart = new Uint32Array(count);
  const decimals = new Uint8Array(count);
  /** A number's double, for the registry formats (JSON writes its text). */
  const numberValue = new Float64Array(count);
  /** A number outside the plain form: its text as Number::toString writes it. */
  const numberText: (string | null)[] = keys.map(() => null);
  /**
   * The body as text, made on first need: for Number() on a number outside the plain form, and for a
   * string field whose refinement has no bytes form. Only printable ASCII is taken, so Latin-1
   * decodes it as UTF-8 would. Reset for every body.
   */
  let bodyText: string | null = null;
  const textOf = (b: Uint8Array): string => (bodyText ??= Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('latin1'));
  /** Whether the number readNumber read last is written as Number::toString would write it. */
  let numberAsWritten = true;
  /**
   * The fields of the current point whose value the schema refuses (a bit each), and those values:
   * a point of refused values is read on, so that a body of them is refused here with zod's own
   * details (refusedValues) instead of going through JSON.parse and zod whole.
   */
  let refusedFields = 0;
  const refusedValue: unknown[] = keys.map(() => undefined);
  function refuse(j: number, value: unknown): void {
    refusedFields |= 1 << j;
    refusedValue[j] = value;
  }

  /** The field whose name is b[from, to), or -1. */
  function fieldOf(b: Uint8Array, from: number, to: number): number {
    const length = to - from;
    for (let j = 0; j < count; j++) {
      const name = names[j] as Uint8Array;
      if (name.length !== length) continue;
      let k = 0;
      while (k < length && b[from + k] === name[k]) k++;
      if (k === length) return j;
    }
    return -1;
  }

  /** Reads the number at i into field j's slots: its end, or -1 when it is not a JSON number (a value the schema refuses: refuse()). */
  function readNumber(b: Uint8Array, i: number, j: number): number {
    const numberStart = i;
    let sign = 0;
    if (b[i] === MINUS) {
      sign = 1;
      i++;
    }
    const intStart = i;
    let r = 0;
    let digits = 0;
    if (b[i] === ZERO) i++;
    else if (isDigit(b[i])) {
      for (let c = b[i] as number; c >= ZERO && c <= NINE; c = b[++i] as number) r = r * 10 + (c - ZERO);
      digits = i - intStart;
    } else return -1;
    const intEnd = b[intStart] === ZERO ? intStart : i;
    let kept = 0; // decimals up to the last that is not 0
    let leadingZeros = -1; // decimals before the first that is not 0
    let trimmed = r;
    const fraction = i + 1;
    let fractionEnd = fraction;
    if (b[i] === DOT) {
      i++;
      if (!isDigit(b[i])) return -1;
      for (let c = b[i] as number; c >= ZERO && c <= NINE; c = b[++i] as number) {
        r = r * 10 + (c - ZERO);
        if (c !== ZERO) {
          kept = i + 1 - fraction;
          trimmed = r;
          if (leadingZeros < 0) leadingZeros = i - fraction;
        }
      }
      fractionEnd = i;
    }
    let exponent = false;
    if (b[i] === 101 || b[i] === 69 /* e, E */) {
      exponent = true;
      i++;
      if (b[i] === 43 /* + */ || b[i] === MINUS) i++;
      if (!isDigit(b[i])) return -1;
      while (isDigit(b[i])) i++;
    }

    let value: number;
    if (!exponent && digits + kept <= MAX_DIGITS && !(digits === 0 && leadingZeros > MAX_LEADING_ZEROS)) {
      const magnitude = trimmed / (POW10[kept] as number);
      value = sign === 1 ? -magnitude : magnitude;
      numberText[j] = null;
      negative[j] = sign;
      start[j] = intStart;
      end[j] = intEnd;
      decimalStart[j] = fraction;
      decimals[j] = kept;
      // As written, unless it has trailing decimal zeros or is -0.
      numberAsWritten = fractionEnd - fraction === kept && !(sign === 1 && trimmed === 0);
    } else {
      // More significant digits than the above allows: most often a coordinate that a program computed
      // and JSON.stringify wrote with 16 or 17 digits. Guess its double from the digits read (the
      // quotient of a rounded integer, so it may be one off), and take the guess when Number::toString
      // writes it exactly as the body has it: that text reads back as the guess, so the guess is the
      // double JSON.parse gives, and the number is as written. Right for about 86 % of random doubles,
      // it saves slicing the body's text, V8's string-to-double and comparing two strings; anything
      // else goes through Number().
      const guess = exponent || kept >= POW10.length ? Number.NaN : (sign === 1 ? -trimmed : trimmed) / (POW10[kept] as number);
      const guessText = '' + guess; // "NaN" is not the text of a JSON number
      if (isWrittenAs(guessText, b, numberStart, i)) {
        value = guess;
        numberText[j] = guessText;
        numberAsWritten = true;
      } else {
        // Any other JSON number: Number() reads JSON's number grammar to the same double as JSON.parse.
        const written = textOf(b).slice(numberStart, i);
        value = Number(written);
        const canonical = '' + value;
        numberText[j] = canonical;
        numberAsWritten = canonical === written;
      }
    }
    numberValue[j] = value;
    if (!(accepts[j] as (v: unknown) => boolean)(value)) refuse(j, value);
    return i;
  }

  /**
   * Reads the string at i (its opening quote) into field j's slots: its end, or -1 when it is not a
   * plain string (a value the schema refuses: refuse()).
   */
  function readString(b: Uint8Array, i: number, j: number): number {
    if (b[i] !== QUOTE) return -1;
    const stringEnd = plainStringEnd(b, i + 1);
    if (stringEnd < 0) return -1;
    const ascii = acceptsAscii[j];
    if (!(ascii ? ascii(b, i + 1, stringEnd) : (accepts[j] as (v: unknown) => boolean)(textOf(b).slice(i + 1, stringEnd))))
      refuse(j, textOf(b).slice(i + 1, stringEnd));
    start[j] = i + 1;
    end[j] = stringEnd;
    return stringEnd + 1;
  }

  /**
   * The end of the object at i when it is written as its message value will be: the schema's fields
   * in order, each after the same bytes as JSON.stringify writes before it (prefixes), nothing else,
   * every number as Number::toString writes it. Otherwise -1. (Values the schema refuses: refuse().)
   */
  const readAsWritten = compileReadAsWritten(prefixes, isString, readString, readNumber, () => numberAsWritten, options.generate);

  /** Writes into o at p the message value of the point whose fields are in the slots; the end of it. */
  function writeValue(b: Uint8Array, o: Buffer, p: number, seen: number): number {
    for (let j = 0; j < count; j++) {
      const prefix = prefixes[j] as Uint8Array;
      // eslint-disable-next-line @typescript-eslint/prefer-for-of -- a byte copy on the hot path, indexed
      for (let k = 0; k < prefix.length; k++) o[p++] = prefix[k] as number;
      const text = numberText[j];
      if ((seen & (1 << j)) === 0) {
        const value = defaults[j] as Uint8Array;
        // eslint-disable-next-line @typescript-eslint/prefer-for-of -- as above
        for (let k = 0; k < value.length; k++) o[p++] = value[k] as number;
      } else if (isString[j]) {
        const to = end[j] as number;
        for (let k = start[j] as number; k < to; k++) o[p++] = b[k] as number;
        o[p++] = QUOTE;
      } else if (text !== null && text !== undefined) {
        for (let k = 0; k < text.length; k++) o[p++] = text.charCodeAt(k);
      } else {
        const from = start[j] as number;
        const to = end[j] as number;
        const n = decimals[j] as number;
        // No sign for zero: -0 is written "0", as Number::toString writes it.
        if (negative[j] === 1 && (from !== to || n > 0)) o[p++] = MINUS;
        if (from === to) o[p++] = ZERO;
        else for (let k = from; k < to; k++) o[p++] = b[k] as number;
        if (n > 0) {
          o[p++] = DOT;
          const d = decimalStart[j] as number;
          for (let k = 0; k < n; k++) o[p++] = b[d + k] as number;
        }
      }
    }
    o[p++] = CLOSE_OBJECT;
    return p;
  }

  /**
   * writeValue for a registry format: the header, then each field in the schema's order. The strings
   * are printable ASCII here (plainStringEnd): their bytes are their UTF-8. json-schema is the JSON
   * value after the header.
   */
  function writeFramedValue(b: Uint8Array, o: Buffer, p: number, seen: number, { format, header }: RegistryFraming): number {
    // eslint-disable-next-line @typescript-eslint/prefer-for-of -- a byte copy on the hot path, indexed
    for (let k = 0; k < header.length; k++) o[p++] = header[k] as number;
    if (format === 'json-schema') return writeValue(b, o, p, seen);
    for (let j = 0; j < count; j++) {
      if (isString[j]) {
        const from = start[j] as number;
        const to = end[j] as number;
        p = writeLength(o, p, format, j, to - from);
        for (let k = from; k < to; k++) o[p++] = b[k] as number;
      } else p = writeDoubleField(o, p, format, j, (seen & (1 << j)) === 0 ? (defaultValues[j] as number) : (numberValue[j] as number));
    }
    return p;
  }
  const framedBytes = format === null ? 0 : registryOverhead(count) + (format === 'json-schema' ? fixedBytes : 0);

  // `framing`: of `format` (singlePassFor keeps them together); absent for JSON.
  return function singlePass(body: Uint8Array, maxPoints: number, framing?: RegistryFraming): EncodedPoints | RefusedPoints | null {
    // A plain Uint8Array whatever the caller has (a Buffer, a view of uWebSockets.js' memory): one
    // shape at every byte read, and subarray() without Buffer's constructor.
    const b = new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
    let i = skipWhitespace(b, 0);
    if (b[i] !== OPEN_ARRAY) return null;
    i = skipWhitespace(b, i + 1);
    if (b[i] !== OPEN_OBJECT) return null; // [] and anything that is not an object: the general path
    bodyText = null;
    /** The values the schema refuses, point by point; null while every point so far is valid. */
    let refused: RefusedValue[] | null = null;
    let points = 0;
    let out: Buffer | null = null; // the scratch, once a value is written
    let p = 0; // bytes used in it
    let bytes = 0;
    let largestValue = 0;
    for (;;) {
      if (points === maxPoints) return null;
      if (b[i] !== OPEN_OBJECT) return null;
      const objectStart = i;
      // The object is the message value as it stands when it is what JSON.stringify writes for zod's
      // output (JSON.stringify's own clients send exactly that): then it is the message value.
      let seen = all;
      refusedFields = 0;
      const asWritten = readAsWritten(b, i);
      if (asWritten >= 0) i = asWritten;
      else {
        i = skipWhitespace(b, i + 1);
        seen = 0;
        refusedFields = 0; // read again from its start
        if (b[i] !== CLOSE_OBJECT) {
          for (;;) {
            if (b[i] !== QUOTE) return null;
            const nameEnd = plainStringEnd(b, i + 1);
            if (nameEnd < 0) return null;
            const j = fieldOf(b, i + 1, nameEnd);
            i = skipWhitespace(b, nameEnd + 1);
            if (b[i] !== COLON) return null;
            i = skipWhitespace(b, i + 1);
            if (j < 0) i = skipScalar(b, i);
            else {
              // JSON.parse keeps the last of duplicate keys: rare enough to leave to it.
              if ((seen & (1 << j)) !== 0) return null;
              seen |= 1 << j;
              i = isString[j] ? readString(b, i, j) : readNumber(b, i, j);
            }
            if (i < 0) return null;
            i = skipWhitespace(b, i);
            if (b[i] === COMMA) {
              i = skipWhitespace(b, i + 1);
              continue;
            }
            if (b[i] !== CLOSE_OBJECT) return null;
            break;
          }
        }
        i++;
      }
      // A required field absent is refused as zod refuses it: its schema run on undefined.
      const missing = required & ~seen;
      const invalid = refusedFields | missing;
      for (let j = 0; invalid !== 0 && j < count; j++) {
        if ((invalid & (1 << j)) !== 0)
          (refused ??= []).push({ index: points, field: keys[j] as string, value: (missing & (1 << j)) !== 0 ? undefined : refusedValue[j] });
      }

      // Once a point is refused, the rest are only read: the body is refused whole.
      if (refused === null) {
        const messages = scratchOffsets(points + 1);
        const m = 4 * points;
        let keyStart = start[keyIndex] as number;
        let keyEnd = end[keyIndex] as number;
        if (framing !== undefined) {
          // A registry format: the value written anew, its key after it (the id's bytes; printable
          // ASCII, no escape: its UTF-8 as it stands). Nothing of the body is copied besides.
          out = scratchBytes(p, framedBytes + 2 * (i - objectStart));
          messages[m] = p;
          p = writeFramedValue(b, out, p, seen, framing);
          messages[m + 1] = p;
          for (let k = keyStart; k < keyEnd; k++) out[p++] = b[k] as number;
          keyStart = p - (keyEnd - keyStart);
          keyEnd = p;
        } else if (asWritten >= 0) {
          // The value is the object as it stands in the body: no copy here.
          messages[m] = objectStart;
          messages[m + 1] = i;
        } else {
          if (out === null) {
            // The first value to write: after a copy of the body, where the other messages stay.
            out = scratchBytes(0, b.length);
            out.set(b, 0);
            p = b.length;
          }
          // A value holds at most the point's own bytes, the field prefixes and defaults, and the
          // text of its numbers as Number::toString writes them.
          out = scratchBytes(p, fixedBytes + (i - objectStart));
          messages[m] = p;
          p = writeValue(b, out, p, seen);
          messages[m + 1] = p;
        }
        const valueBytes = (messages[m + 1] as number) - (messages[m] as number);
        if (valueBytes > largestValue) largestValue = valueBytes;
        // JSON: the key is the id's bytes in the body (printable ASCII, no escape: its UTF-8 as it stands).
        messages[m + 2] = keyStart;
        messages[m + 3] = keyEnd;
        bytes += valueBytes + keyEnd - keyStart;
      }
      points++;

      i = skipWhitespace(b, i);
      if (b[i] === COMMA) {
        i = skipWhitespace(b, i + 1);
        continue;
      }
      if (b[i] !== CLOSE_ARRAY) return null;
      break;
    }
    if (skipWhitespace(b, i + 1) !== b.length) return null;
    if (refused !== null) {
      const invalid = refusedValues(schema, refused);
      return invalid === null ? null : { ok: false, invalidPoints: invalid.invalidPoints, details: invalid.details, count: points };
    }
    // A registry format's data is all written: a plain view of the scratch (no Buffer's constructor).
    const data = out === null ? b : framing === undefined ? out.subarray(0, p) : new Uint8Array(out.buffer, out.byteOffset, p);
    return { count: points, data, messages: scratchOffsets(points).subarray(0, 4 * points), bytes, largestValue };
  };
}

/** The track-point schema's: a body's messages, validatePoints' answer for a body refused, or null (the general path). */
export const singlePass = compileSinglePass(TrackPointSchema, 'container_id' satisfies keyof TrackPoint);

const framedPasses = new Map<RegistryFormat, typeof singlePass>();

/**
 * The track-point schema's single pass writing values in a registry format, compiled once per
 * format (whatever the schema id: the warm-up at start trains the code that serves), or JSON's.
 */
export function singlePassFor(format: RegistryFormat | null): typeof singlePass {
  if (format === null) return singlePass;
  let pass = framedPasses.get(format);
  if (pass === undefined) {
    pass = compileSinglePass(TrackPointSchema, 'container_id' satisfies keyof TrackPoint, { generate: true, format });
    framedPasses.set(format, pass);
  }
  return pass;
}
