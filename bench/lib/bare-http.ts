// The HTTP floor for bench/floor.ts: uWebSockets.js reading each POST body and answering 202, nothing
// else (no parsing, no Kafka). Listens on the port given as the first argument; prints "ready".
// A second argument, µs, keeps the CPU busy that long per request before the answer: a stand-in for a
// service's own work, to see what tail this machine gives a server of that cost (bench/floor.ts).
import uWS from 'uWebSockets.js';

const port = Number(process.argv[2]);
const workMs = Number(process.argv[3] ?? 0) / 1000;
// As bytes, as the service writes them (src/http/server.ts): uWS converts a string on every call.
const STATUS = Buffer.from('202 Accepted');
const CONTENT_TYPE = Buffer.from('content-type');
const JSON_TYPE = Buffer.from('application/json');
const BODY = Buffer.from('{"accepted":1}');

function work(): void {
  const until = performance.now() + workMs;
  while (performance.now() < until);
}

uWS
  .App()
  .post('/track', (res) => {
    res.onAborted(() => undefined);
    res.onData((_chunk, isLast) => {
      if (!isLast) return;
      if (workMs > 0) work();
      res.cork(() => res.writeStatus(STATUS).writeHeader(CONTENT_TYPE, JSON_TYPE).end(BODY));
    });
  })
  .listen('127.0.0.1', port, (socket) => {
    if (socket === false) throw new Error(`cannot listen on 127.0.0.1:${port}`);
    console.log('ready');
  });
