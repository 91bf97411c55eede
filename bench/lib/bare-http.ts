// The HTTP floor for bench/floor.ts: uWebSockets.js reading each POST body and answering 202, nothing
// else (no parsing, no Kafka). Listens on the port given as the first argument; prints "ready".
import uWS from 'uWebSockets.js';

const port = Number(process.argv[2]);
uWS
  .App()
  .post('/track', (res) => {
    res.onAborted(() => undefined);
    res.onData((_chunk, isLast) => {
      if (isLast) res.cork(() => res.writeStatus('202 Accepted').writeHeader('content-type', 'application/json').end('{"accepted":1}'));
    });
  })
  .listen('127.0.0.1', port, (socket) => {
    if (socket === false) throw new Error(`cannot listen on 127.0.0.1:${port}`);
    console.log('ready');
  });
