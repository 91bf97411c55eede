// Raw HTTP exchanges, for what fetch() cannot send: HTTP/1.0, duplicate headers, oversized header
// blocks, a body split across writes.
import { connect, type Socket } from 'node:net';

/** Writes with `write`, then collects everything the server answers until it closes or goes quiet. */
export function raw(port: number, write: (s: Socket) => void, quietMs = 300): Promise<{ text: string; closed: boolean }> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    let text = '';
    let timer: NodeJS.Timeout;
    const done = (closed: boolean) => {
      clearTimeout(timer);
      s.destroy();
      resolve({ text, closed });
    };
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => done(false), quietMs);
    };
    s.on('data', (d) => {
      text += d.toString();
      arm();
    });
    s.on('close', () => done(true));
    s.on('error', () => done(true));
    s.on('connect', () => {
      write(s);
      arm();
    });
  });
}

/** The status code and the JSON body of a raw answer. */
export function parseAnswer(text: string): { status: number; headers: string; body: unknown } {
  const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1] ?? 0);
  const split = text.indexOf('\r\n\r\n');
  const headers = split < 0 ? text : text.slice(0, split);
  const rest = split < 0 ? '' : text.slice(split + 4);
  let body: unknown;
  try {
    body = JSON.parse(rest);
  } catch {
    body = rest;
  }
  return { status, headers, body };
}
