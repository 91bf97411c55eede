// The design rows' load generator (bench/lib/paced-load.ts, here on the test's thread): every
// connection of its pool sends at the same pace, so that none idles until the service closes it
// (10 s idle) and a request written as it closes goes unanswered.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generate } from '../../../bench/lib/paced-load.js';

/** Answers every request 202 at once, counting the requests of each client port. */
let server: Server;
let url: string;
const perConnection = new Map<number, number>();

beforeAll(async () => {
  server = createServer((req, res) => {
    const port = req.socket.remotePort!;
    perConnection.set(port, (perConnection.get(port) ?? 0) + 1);
    req.resume();
    req.on('end', () => res.writeHead(202, { 'content-type': 'application/json' }).end('{"accepted":1}'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

describe('pacedLoad', () => {
  it('spreads the requests over every connection of a pool larger than the requests in flight', async () => {
    const r = await generate({ url, path: '/track', body: '[]', connections: 20, rate: 400, seconds: 1 });
    expect(r.ok2xx).toBe(400);
    expect(r.errors + r.non2xx).toBe(0);
    // A fast server has one request in flight at a time: a stack would send nearly all on one connection.
    expect(perConnection.size).toBe(20);
    for (const requests of perConnection.values()) expect(requests).toBeGreaterThanOrEqual(10);
  });
});
