// RFC 3339 section 5.6 `date-time`, checked byte by byte (no regex, no allocation):
//
//   date-time      = full-date "T" full-time          ; "T" and "Z" may be lower case (5.6 NOTE)
//   full-date      = date-fullyear "-" date-month "-" date-mday
//   full-time      = partial-time time-offset
//   partial-time   = time-hour ":" time-minute ":" time-second [time-secfrac]
//   time-secfrac   = "." 1*DIGIT
//   time-offset    = "Z" / ("+" / "-") time-hour ":" time-minute
//
// plus the semantic rules of section 5.7: the day exists in that month and year (no 30 February),
// and a leap second (:60) only where the instant, converted to UTC, is 23:59:60.
//
// The rule is written once, over bytes: a date-time is ASCII, and the single pass
// (single-pass.ts) checks timestamps where they stand in the request body, without making a
// string of each (a third of the cost of the check on a string, measured). The string form, the
// schema's refinement, copies the string's characters and runs the same code.

const DAYS_IN_MONTH = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** Two digits at b[i] as a number, or -1. */
function two(b: Uint8Array, i: number): number {
  const x = (b[i] as number) - 48;
  const y = (b[i + 1] as number) - 48;
  return x >= 0 && x <= 9 && y >= 0 && y <= 9 ? x * 10 + y : -1;
}

function isLeapYear(y: number): boolean {
  return (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
}

/** Whether the bytes b[from, to) are an RFC 3339 date-time. */
export function isRfc3339DateTimeAscii(b: Uint8Array, from: number, to: number): boolean {
  // Shortest form: 2024-05-01T12:00:00Z (20 characters).
  if (to - from < 20) return false;
  const y1 = two(b, from);
  const y2 = two(b, from + 2);
  if (y1 < 0 || y2 < 0) return false;
  const year = y1 * 100 + y2;
  if (b[from + 4] !== 45 /* - */ || b[from + 7] !== 45) return false;
  const month = two(b, from + 5);
  if (month < 1 || month > 12) return false;
  const day = two(b, from + 8);
  const maxDay = month === 2 && isLeapYear(year) ? 29 : (DAYS_IN_MONTH[month] as number);
  if (day < 1 || day > maxDay) return false;
  const t = b[from + 10];
  if (t !== 84 /* T */ && t !== 116 /* t */) return false;
  const hour = two(b, from + 11);
  if (hour < 0 || hour > 23 || b[from + 13] !== 58 /* : */) return false;
  const minute = two(b, from + 14);
  if (minute < 0 || minute > 59 || b[from + 16] !== 58) return false;
  const second = two(b, from + 17);
  if (second < 0 || second > 60) return false;

  // From here on every read is checked against `to`: the bytes after it are not the value's.
  let i = from + 19;
  if (i < to && b[i] === 46 /* . */) {
    i++;
    const start = i;
    while (i < to && (b[i] as number) >= 48 && (b[i] as number) <= 57) i++;
    if (i === start) return false; // "." needs at least one digit
  }

  let offsetMinutes: number;
  const o = i < to ? b[i] : -1;
  if (o === 90 /* Z */ || o === 122 /* z */) {
    if (i + 1 !== to) return false;
    offsetMinutes = 0;
  } else if (o === 43 /* + */ || o === 45 /* - */) {
    if (i + 6 !== to || b[i + 3] !== 58) return false;
    const oh = two(b, i + 1);
    const om = two(b, i + 4);
    if (oh < 0 || oh > 23 || om < 0 || om > 59) return false;
    offsetMinutes = (o === 43 ? 1 : -1) * (oh * 60 + om);
  } else {
    return false;
  }

  if (second === 60) {
    // Local 15:59:60-08:00 is 23:59:60Z: allowed. Local 23:59:60+01:00 is 22:59:60Z: not.
    const utcMinuteOfDay = (((hour * 60 + minute - offsetMinutes) % 1440) + 1440) % 1440;
    if (utcMinuteOfDay !== 23 * 60 + 59) return false;
  }
  return true;
}

/** The string's characters for isRfc3339DateTimeAscii: one buffer for the usual lengths. */
const scratch = new Uint8Array(64);

/** Whether s is an RFC 3339 date-time (the schema's refinement; the same rule as the bytes form). */
export function isRfc3339DateTime(s: string): boolean {
  const n = s.length;
  const b = n <= scratch.length ? scratch : new Uint8Array(n); // a long fraction: rare
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c > 127) return false; // every character of a date-time is ASCII
    b[i] = c;
  }
  return isRfc3339DateTimeAscii(b, 0, n);
}
// The bytes form, for the fast paths: fast-path.ts reads `ascii` off a refinement, and the single
// pass checks the body's bytes with it.
isRfc3339DateTime.ascii = isRfc3339DateTimeAscii;
