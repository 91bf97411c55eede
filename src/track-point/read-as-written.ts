// readAsWritten, the single pass's test for a point written exactly as its message value: the
// schema's fields in order, each after the bytes JSON.stringify writes before it, nothing else.
const CLOSE_OBJECT = 125;

export type ValueReader = (b: Uint8Array, i: number, j: number) => number;

/**
 * readAsWritten for these fields, generated at start-up with each prefix's bytes as constants in
 * the comparisons (`b[i + 1] !== 34 || …`): the same test as the loop over the prefixes below, which
 * loads every byte of them from an array, and about a fifth dearer per point. `generate:
 * false`, or a process that forbids code generation (--disallow-code-generation-from-strings), takes
 * the loop.
 */
export function compileReadAsWritten(
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
