// Past the value of a field the track-point schema does not know (zod drops it, and so does the
// single pass, single-pass.ts): a JSON scalar, read but not kept. Off the hot path: most bodies carry
// only the schema's fields. Its characters are its own, as single-pass.ts keeps its own: imported into
// the single pass's loops, they slow it down (`make bench-floor`, row "single pass").

const SPACE = 32;
const QUOTE = 34;
const MINUS = 45;
const DOT = 46;
const ZERO = 48;
const NINE = 57;
const BACKSLASH = 92;

function isDigit(c: number | undefined): boolean {
  return c !== undefined && c >= ZERO && c <= NINE;
}

import { bytesOf } from './field-layout.js';

/** Past a value of a field the schema does not know (dropped, as zod drops it): a JSON scalar, or -1. */
export function skipScalar(b: Uint8Array, i: number): number {
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
