/**
 * Collects what a child process prints as whole lines: a pipe may hand over a long line (an error
 * with its stack) in two reads, and a line cut in two would not match what a test looks for.
 */
export function collectLines(stream: NodeJS.ReadableStream, into: string[]): void {
  let rest = '';
  stream.on('data', (chunk: Buffer) => {
    const lines = (rest + chunk.toString()).split('\n');
    rest = lines.pop()!;
    into.push(...lines.filter(Boolean));
  });
  stream.on('end', () => {
    if (rest !== '') into.push(rest);
  });
}
