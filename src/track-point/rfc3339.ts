// RFC 3339 section 5.6 `date-time`, checked character by character (no regex, no allocation):
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

const DAYS_IN_MONTH = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

function digit(s: string, i: number): number {
  const c = s.charCodeAt(i) - 48;
  return c >= 0 && c <= 9 ? c : -1;
}

/** Two digits at i as a number, or -1. */
function two(s: string, i: number): number {
  const a = digit(s, i);
  const b = digit(s, i + 1);
  return a < 0 || b < 0 ? -1 : a * 10 + b;
}

function isLeapYear(y: number): boolean {
  return (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
}

export function isRfc3339DateTime(s: string): boolean {
  // Shortest form: 2024-05-01T12:00:00Z (20 characters).
  if (s.length < 20) return false;
  const y1 = two(s, 0);
  const y2 = two(s, 2);
  if (y1 < 0 || y2 < 0) return false;
  const year = y1 * 100 + y2;
  if (s.charCodeAt(4) !== 45 /* - */ || s.charCodeAt(7) !== 45) return false;
  const month = two(s, 5);
  if (month < 1 || month > 12) return false;
  const day = two(s, 8);
  const maxDay = month === 2 && isLeapYear(year) ? 29 : (DAYS_IN_MONTH[month] ?? 0);
  if (day < 1 || day > maxDay) return false;
  const t = s.charCodeAt(10);
  if (t !== 84 /* T */ && t !== 116 /* t */) return false;
  const hour = two(s, 11);
  if (hour < 0 || hour > 23 || s.charCodeAt(13) !== 58 /* : */) return false;
  const minute = two(s, 14);
  if (minute < 0 || minute > 59 || s.charCodeAt(16) !== 58) return false;
  const second = two(s, 17);
  if (second < 0 || second > 60) return false;

  let i = 19;
  if (s.charCodeAt(i) === 46 /* . */) {
    i++;
    const start = i;
    while (digit(s, i) >= 0) i++;
    if (i === start) return false; // "." needs at least one digit
  }

  let offsetMinutes: number;
  const o = s.charCodeAt(i);
  if (o === 90 /* Z */ || o === 122 /* z */) {
    if (i + 1 !== s.length) return false;
    offsetMinutes = 0;
  } else if (o === 43 /* + */ || o === 45 /* - */) {
    if (i + 6 !== s.length || s.charCodeAt(i + 3) !== 58) return false;
    const oh = two(s, i + 1);
    const om = two(s, i + 4);
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
