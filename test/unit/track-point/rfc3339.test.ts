import { describe, expect, it } from 'vitest';
import { isRfc3339DateTime, isRfc3339DateTimeAscii } from '../../../src/track-point/rfc3339.js';

// RFC 3339 section 5.6 grammar and the 5.7 restrictions, as the README's field table states them.
const valid = [
  '2024-05-01T12:00:00Z',
  '2024-05-01t12:00:00z', // T and Z are case-insensitive (5.6 NOTE)
  '2024-05-01T12:00:00.1Z',
  '2024-05-01T12:00:00.123456789012Z', // any number of fraction digits
  '2024-05-01T12:00:00+02:00',
  '2024-05-01T12:00:00-00:00', // unknown local offset (4.3)
  '2024-05-01T12:00:00+23:59',
  '2024-05-01T12:00:00-23:59',
  '2024-02-29T00:00:00Z', // leap year
  '2000-02-29T00:00:00Z', // divisible by 400
  '0000-01-01T00:00:00Z',
  '9999-12-31T23:59:59Z',
  '1990-12-31T23:59:60Z', // leap second at 23:59:60 UTC
  '1990-12-31T15:59:60-08:00', // = 23:59:60Z (the RFC's own example)
  '1991-01-01T00:59:60+01:00', // = 23:59:60Z the day before
  '1937-01-01T12:00:27.87+00:20', // the RFC's example with an odd offset
];
const invalid = [
  '',
  '2024-05-01',
  '2024-05-01T12:00Z', // seconds are required
  '2024-05-01 12:00:00Z', // space separator is not the 5.6 grammar
  '2024-05-01T12:00:00', // offset required
  '2024-05-01T12:00:00.Z', // fraction needs a digit
  '2024-02-30T12:00:00Z', // no 30 February
  '2023-02-29T00:00:00Z', // not a leap year
  '1900-02-29T00:00:00Z', // divisible by 100, not 400
  '2024-04-31T00:00:00Z',
  '2024-13-01T00:00:00Z',
  '2024-00-01T00:00:00Z',
  '2024-01-00T00:00:00Z',
  '2024-01-01T24:00:00Z',
  '2024-01-01T23:60:00Z',
  '2024-01-01T23:59:61Z',
  '2024-01-01T12:00:60Z', // leap second not at 23:59 UTC
  '1990-12-31T23:59:60+01:00', // = 22:59:60Z
  '2024-01-01T12:00:00+24:00',
  '2024-01-01T12:00:00+01:60',
  '2024-01-01T12:00:00+0100',
  '2024-01-01T12:00:00+01',
  '2024-01-01T12:00:00ZZ',
  '2024-01-01T12:00:00Z ',
  ' 2024-01-01T12:00:00Z',
  '24-01-01T12:00:00Z',
  '+2024-01-01T12:00:00Z',
  '２０２４-01-01T12:00:00Z', // full-width digits
  '2024-1-01T12:00:00Z',
  '2024-01-01X12:00:00Z',
];

describe('isRfc3339DateTime', () => {
  it.each(valid)('accepts %s', (s) => expect(isRfc3339DateTime(s)).toBe(true));
  it.each(invalid)('rejects %j', (s) => expect(isRfc3339DateTime(s)).toBe(false));
  it('agrees with Date on every day of a leap and a common year', () => {
    for (const year of [2023, 2024]) {
      for (let month = 1; month <= 12; month++) {
        for (let day = 1; day <= 31; day++) {
          const s = `${year}-${String(month).padStart(2, '0')}-${String(day).padStart(2, '0')}T00:00:00Z`;
          const d = new Date(s);
          const real = d.getUTCMonth() + 1 === month && d.getUTCDate() === day;
          expect(isRfc3339DateTime(s), s).toBe(real);
        }
      }
    }
  });
});

// The single pass checks a timestamp where it stands in the request body: the bytes form must read
// nothing outside its range, whatever follows (a closing quote, or bytes that would complete it).
describe('isRfc3339DateTimeAscii, on a range of a larger buffer', () => {
  const ascii = [...valid, ...invalid].filter((s) => [...s].every((c) => c.charCodeAt(0) < 0x80));
  const around: [string, string][] = [
    ['', ''],
    ['"', '"'],
    ['{"timestamp":"', '","speed":1}'],
    ['x', 'Z'],
    ['x', '.5Z'],
    ['x', '+01:00'],
    ['x', '00:00Z'],
  ];
  it.each(ascii)('agrees with the string form on %j', (s) => {
    for (const [before, after] of around) {
      const b = Buffer.from(before + s + after, 'latin1');
      expect(isRfc3339DateTimeAscii(b, before.length, before.length + s.length), `${before}|${s}|${after}`).toBe(isRfc3339DateTime(s));
    }
  });
  it('rejects a date-time cut short of its offset or fraction, although the next bytes complete it', () => {
    const b = Buffer.from('2024-05-01T12:00:00.5Z');
    expect(isRfc3339DateTimeAscii(b, 0, b.length)).toBe(true);
    expect(isRfc3339DateTimeAscii(b, 0, 19)).toBe(false); // 2024-05-01T12:00:00
    expect(isRfc3339DateTimeAscii(b, 0, 20)).toBe(false); // 2024-05-01T12:00:00.
    expect(isRfc3339DateTimeAscii(b, 0, 21)).toBe(false); // 2024-05-01T12:00:00.5
  });
});

describe('the string form', () => {
  it('rejects any character outside ASCII, wherever it stands', () => {
    const s = '2024-05-01T12:00:00.123456Z';
    for (let i = 0; i < s.length; i++) expect(isRfc3339DateTime(s.slice(0, i) + 'é' + s.slice(i + 1)), String(i)).toBe(false);
  });
  it('takes a fraction of any length', () => {
    expect(isRfc3339DateTime(`2024-05-01T12:00:00.${'1'.repeat(500)}Z`)).toBe(true);
    expect(isRfc3339DateTime(`2024-05-01T12:00:00.${'1'.repeat(500)}`)).toBe(false);
  });
});
