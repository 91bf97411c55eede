// The HTTP floor for bench/floor.ts: uWebSockets.js reading each POST body and answering 202, nothing
// else (no parsing, no Kafka). Listens on the port given as the first argument; prints "ready".
// A second argument, µs, keeps the CPU busy that long per request before the answer: a stand-in for a
// service's own work, to see what tail this machine gives a server of that cost (bench/floor.ts).
// A third, a directory: each request also writes a record of the size of a 1-point journal record
// into a file there, and its answer waits for the service's own group commit (fdatasync, at most one
// every JOURNAL_SYNC_INTERVAL_MS): the floor of JOURNAL_SYNC=disk.
import { openSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { loadConfig } from '../../src/config.js';
import { GroupCommit } from '../../src/journal/group-commit.js';
import { uwsBuild } from '../../src/http/uws.js';

const port = Number(process.argv[2]);
const workMs = Number(process.argv[3] ?? 0) / 1000;
const commitDir = process.argv[4];
// As bytes, as the service writes them (src/http/server.ts): uWS converts a string on every call.
const STATUS = Buffer.from('202 Accepted');
const CONTENT_TYPE = Buffer.from('content-type');
const JSON_TYPE = Buffer.from('application/json');
const BODY = Buffer.from('{"accepted":1}');

function work(): void {
  const until = performance.now() + workMs;
  while (performance.now() < until);
}

/** With a directory: appends a record and calls `answer` once it is on the disk. */
const commitThen: ((answer: () => void) => void) | null = (() => {
  if (commitDir === undefined) return null;
  const fd = openSync(join(commitDir, `bare-${process.pid}.wal`), 'wx');
  const record = Buffer.alloc(144, 1); // a 1-point record of the service's journal: header, offsets, key and value
  const commits = new GroupCommit(commitDir, loadConfig(process.env).journalSyncIntervalMs);
  let end = 0;
  return (answer) => {
    end += writeSync(fd, record, 0, record.byteLength, end);
    commits.written(fd);
    commits.afterCommit((err) => {
      if (err !== null) throw err;
      answer();
    });
  };
})();

uwsBuild()
  .uws.App()
  .post('/track', (res) => {
    let aborted = false;
    res.onAborted(() => {
      aborted = true;
    });
    res.onData((_chunk, isLast) => {
      if (!isLast) return;
      if (workMs > 0) work();
      const answer = () => {
        if (!aborted) res.cork(() => res.writeStatus(STATUS).writeHeader(CONTENT_TYPE, JSON_TYPE).end(BODY));
      };
      if (commitThen === null) answer();
      else commitThen(answer);
    });
  })
  .listen('127.0.0.1', port, (socket) => {
    if (socket === false) throw new Error(`cannot listen on 127.0.0.1:${port}`);
    console.log('ready');
  });
