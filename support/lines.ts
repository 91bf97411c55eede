import { createInterface } from 'node:readline';

/**
 * Collects what a child process prints as whole lines (node:readline): a pipe may hand over a long
 * line (an error with its stack) in two reads, and a line cut in two would not match what a test
 * looks for.
 */
export function collectLines(stream: NodeJS.ReadableStream, into: string[]): void {
  createInterface({ input: stream, crlfDelay: Infinity }).on('line', (line) => {
    if (line !== '') into.push(line);
  });
}
