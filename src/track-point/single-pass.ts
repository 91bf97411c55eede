// The single pass for bodies of valid points: from the request's bytes to the Kafka messages without
// JSON.parse, without a JavaScript object per point, and without turning numbers into doubles and
// back into text.
//
// Why: at 100 points per request, decoding and parsing the body, validating and encoding cost as
// much CPU per point together as librdkafka's threads (`make bench-floor`). Most of it
// builds objects and strings that live for one request and writes numbers back as text that the
// body already holds. The value of a message is the point as JSON.stringify writes zod's output
// (encode.ts): for a body that JSON.stringify wrote, that is the point's own bytes.
//
// What it takes: a JSON array of objects whose known fields hold printable-ASCII strings without
// escapes and numbers, whose other fields hold scalars, each field at most once, with any JSON
// whitespace. An object written exactly as its message value (the schema's fields in order and no
// other, no whitespace, numbers as Number::toString writes them) is its message value as it stands:
// produceBatch gets offsets into the body, for the value and for the id inside it (the key), and
// nothing is copied in JavaScript. Any other is written field by field.
// Such a body whose points are not all valid (a value out of range, a required field absent) is
// refused here: zod runs on the refused fields' values alone and writes the details (schema.ts,
// refusedValues). A bad firmware release sends thousands of these a second, and JSON.parse with zod
// on the whole body cost a refusal more than a valid point.
// Everything else (an escape, non-ASCII text, a nested value, a value of another JSON type, a
// duplicate key, an empty array, more than MAX_POINTS) returns null, and the caller takes the general
// path: UTF-8 check, JSON.parse, the schema, encode.ts. Every byte taken here is ASCII, so a body
// taken is valid UTF-8.
//
// The rules are the schema's: the per-field predicates of the validation fast path (fast-path.ts),
// on the values JSON.parse would give. test/unit/track-point/single-pass.test.ts checks on generated
// bodies that whatever this takes, the general path accepts with the same messages, byte for byte,
// and whatever this refuses, the general path refuses with the same details.
import type { z } from 'zod';
import { scratchBytes, scratchOffsets, type EncodedPoints } from './encode.js';
import { compileFields } from './fast-path.js';
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
 * guesses beyond). Two decimals of at most 15 significant digits are never the same double
 * (DBL_DIG), so such a decimal, trailing zeros dropped, is the shortest text that
 * reads back as its double: what Number::toString, and so JSON.stringify, writes for it, when
 * 1e-6 ≤ |x| < 1e21 (fixed notation). Its digits r < 10^15 are an exact double, as is 10^k, so r / 10^k
 * is correctly rounded: the double JSON.parse gives.
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

const bytesOf = (text: string) => Uint8Array.from(Buffer.from(text, 'utf8'));

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

/** Past a value of a field the schema does not know (dropped, as zod drops it): a JSON scalar, or -1. */
function skipScalar(b: Uint8Array, i: number): number {
  const c = b[i];
  if (c === QUOTE) {
    for (i++; ; i++) {
      const d = b[i];
      if (d === QUOTE) return i + 1;
      if (d === undefined || d < SPACE || d > 126) return -1;
      if (d === BACKSLASH) {
        const e = b[++i];
        if (e === 117 /* u */) {
          for (let k = 1; k <= 4; k++) if (!isHex(b[i + k])) return -1;
          i += 4;
        } else if (e !== QUOTE && e !== BACKSLASH && e !== 47 && e !== 98 && e !== 102 && e !== 110 && e !== 114 && e !== 116) return -1;
      }
    }
  }
  if (c === MINUS || isDigit(c)) {
    if (c === MINUS) i++;
    if (b[i] === ZERO) i++;
    else if (isDigit(b[i])) while (isDigit(b[i])) i++;
    else return -1;
    if (b[i] === DOT) {
      if (!isDigit(b[++i])) return -1;
      while (isDigit(b[i])) i++;
    }
    if (b[i] === 101 || b[i] === 69) {
      i++;
      if (b[i] === 43 || b[i] === MINUS) i++;
      if (!isDigit(b[i])) return -1;
      while (isDigit(b[i])) i++;
    }
    return i;
  }
  for (const literal of LITERALS) {
    if (c !== literal[0]) continue;
    for (let k = 1; k < literal.length; k++) if (b[i + k] !== literal[k]) return -1;
    return i + literal.length;
  }
  return -1;
}

const LITERALS = ['true', 'false', 'null'].map(bytesOf);

function isHex(c: number | undefined): boolean {
  return c !== undefined && ((c >= ZERO && c <= NINE) || (c >= 65 && c <= 70) || (c >= 97 && c <= 102));
}

type ValueReader = (b: Uint8Array, i: number, j: number) => number;

/**
 * readAsWritten for these fields, generated at start-up with each prefix's bytes as constants in
 * the comparisons (`b[i + 1] !== 34 || …`): the same test as the loop over the prefixes below, which
 * loads every byte of them from an array, and about a fifth dearer per point. `generate:
 * false`, or a process that forbids code generation (--disallow-code-generation-from-strings), takes
 * the loop.
 */
function compileReadAsWritten(
  prefixes: readonly Uint8Array[],
  isString: readonly boolean[],
  readString: ValueReader,
  readNumber: ValueReader,
  numberAsWritten: () => boolean,
  generate: boolean,
): (b: Uint8Array, i: number) => number {
  if (generate) {
    try {
      return generatedReadAsWritten(prefixes, isString, readString, readNumber, numberAsWritten);
    } catch (err) {
      if (!(err instanceof EvalError)) throw err;
    }
  }
  return (b, i) => {
    for (let j = 0; j < prefixes.length; j++) {
      const prefix = prefixes[j]!;
      for (let k = 0; k < prefix.length; k++) if (b[i + k] !== prefix[k]) return -1;
      // A string's prefix ends with its opening quote, where readString starts.
      i = isString[j] ? readString(b, i + prefix.length - 1, j) : readNumber(b, i + prefix.length, j);
      if (i < 0 || (!isString[j] && !numberAsWritten())) return -1;
    }
    return b[i] === CLOSE_OBJECT ? i + 1 : -1;
  };
}

function generatedReadAsWritten(
  prefixes: readonly Uint8Array[],
  isString: readonly boolean[],
  readString: ValueReader,
  readNumber: ValueReader,
  numberAsWritten: () => boolean,
): (b: Uint8Array, i: number) => number {
  const fields = prefixes.map((prefix, j) => {
    const same = Array.from(prefix, (c, k) => `b[i + ${k}] !== ${c}`).join(' || ');
    // A string's prefix ends with its opening quote, where readString starts.
    const value = isString[j]
      ? `i = readString(b, i + ${prefix.length - 1}, ${j});`
      : `i = readNumber(b, i + ${prefix.length}, ${j});\n  if (i >= 0 && !numberAsWritten()) return -1;`;
    return `  if (${same}) return -1;\n  ${value}\n  if (i < 0) return -1;`;
  });
  const source = `return function readAsWritten(b, i) {\n${fields.join('\n')}\n  return b[i] === ${CLOSE_OBJECT} ? i + 1 : -1;\n};`;
  const make = new Function('readString', 'readNumber', 'numberAsWritten', source) as (...args: unknown[]) => (b: Uint8Array, i: number) => number;
  return make(readString, readNumber, numberAsWritten);
}

/**
 * Compiles the single pass for an object schema of strings and numbers. keyField names the string
 * field whose text is the message key.
 */
export function compileSinglePass(
  schema: z.ZodObject,
  keyField: string,
  options: { generate: boolean } = { generate: true },
): (body: Uint8Array, maxPoints: number) => EncodedPoints | RefusedPoints | null {
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
  let required = 0;
  fields.forEach((f, j) => {
    if (f.absent === null) required |= 1 << j;
  });
  const all = (1 << count) - 1;
  /** Number::toString writes at most 25 characters (-1.2345678901234567e-300), and 1e20 takes 21 for 4. */
  const NUMBER_TEXT = 25;
  const fixedBytes = prefixes.reduce((n, p) => n + p.length, 0) + defaults.reduce((n, d) => n + (d?.length ?? 0), 0) + (NUMBER_TEXT + 2) * count;

  // Where each field of the current point sits in the body. A string: [start, end). A number: its
  // sign, integer digits [start, end) ("0" as an empty range), and `decimals` significant decimals
  // from decimalStart (trailing zeros dropped): zero is an empty range and no decimal.
  const start = new Uint32Array(count);
  const end = new Uint32Array(count);
  const negative = new Uint8Array(count);
  const decimalStart = new Uint32Array(count);
  const decimals = new Uint8Array(count);
  /** A number outside the plain form: its text as Number::toString writes it. */
  const numberText: (string | null)[] = fields.map(() => null);
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
  const refusedValue: unknown[] = fields.map(() => undefined);
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

  return function singlePass(body: Uint8Array, maxPoints: number): EncodedPoints | RefusedPoints | null {
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
        if (asWritten >= 0) {
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
        // The key is the id's bytes in the body (printable ASCII, no escape: its UTF-8 as it stands).
        messages[m + 2] = start[keyIndex] as number;
        messages[m + 3] = end[keyIndex] as number;
        bytes += valueBytes + (end[keyIndex] as number) - (start[keyIndex] as number);
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
    return { count: points, data: out === null ? b : out.subarray(0, p), messages: scratchOffsets(points).subarray(0, 4 * points), bytes, largestValue };
  };
}

const keyField: keyof TrackPoint = 'container_id';
/**
 * The single pass of the track-point schema: the messages of a body of valid points, validatePoints'
 * answer for a body whose points are read whole but some fields refused, or null (the general path).
 */
export const singlePass = compileSinglePass(TrackPointSchema, keyField);
