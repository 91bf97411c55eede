// Steady load with an account of every point, for the tests that break things for real.
//
// Every point carries the run id in its container id and a sequence number per container (in its
// timestamp: base + seq seconds). Each connection owns its containers and sends requests of
// consecutive points for one container. After the run, the topic is read back and every point that
// got 202 is looked for: lost, duplicated, out of order within its request.
import { randomUUID } from 'node:crypto';
import { Agent, request } from 'node:http';
import { expect } from 'vitest';
import type { ConsumedMessage } from '../../support/kafka.js';

const BASE_MS = Date.UTC(2024, 0, 1);

export interface LoadOptions {
  connections?: number;
  pointsPerRequest?: number;
  containersPerConnection?: number;
  /** A request unanswered after this long counts as a hang. */
  requestTimeoutMs?: number;
  /**
   * Pause between requests of one connection (0: closed loop). The default keeps points in flight at
   * any moment: with 20 ms, a worker killed at a random moment had often nothing unacknowledged left,
   * and a replay that produced nothing passed the kill test.
   */
  pauseMs?: number;
}

interface SentRequest {
  container: string;
  firstSeq: number;
  count: number;
  status: number; // 0: connection error, -1: no answer within requestTimeoutMs
}

export interface Accounting {
  requests: number;
  sent: number;
  accepted: number;
  rejected: number;
  connectionErrors: number;
  hangs: number;
  found: number;
  lost: number;
  duplicated: number;
  /** Found in Kafka although the request was not answered 202 (500 after a partial failure, or no answer). */
  unacknowledgedButDelivered: number;
  /** Of those, found although the request was answered with an error (4xx, 5xx): a promise broken, unlike no answer at all. */
  deliveredAfterError: number;
  /** Accepted requests whose points are not in increasing offsets in their partition. */
  reordered: number;
  statuses: Record<string, number>;
}

export class AccountedLoad {
  readonly runId = `r${randomUUID().slice(0, 8)}`;
  private readonly requests: SentRequest[] = [];
  private readonly nextSeq = new Map<string, number>();
  private running = false;
  private loops: Promise<void>[] = [];
  private readonly opts: Required<LoadOptions>;
  private readonly agent: Agent;
  /** Connection errors by code (ECONNRESET, ECONNREFUSED...). */
  readonly errorCodes: Record<string, number> = {};

  constructor(
    private readonly url: string,
    opts: LoadOptions = {},
  ) {
    this.opts = { connections: 8, pointsPerRequest: 20, containersPerConnection: 5, requestTimeoutMs: 15_000, pauseMs: 5, ...opts };
    this.agent = new Agent({ keepAlive: true, maxSockets: this.opts.connections });
  }

  start(): void {
    this.running = true;
    for (let c = 0; c < this.opts.connections; c++) this.loops.push(this.loop(c));
  }

  async stop(): Promise<void> {
    this.running = false;
    await Promise.all(this.loops);
    this.agent.destroy();
  }

  /** Requests answered with this status so far. */
  statusCount(status: number): number {
    return this.requests.reduce((n, r) => n + (r.status === status ? 1 : 0), 0);
  }

  /** Points answered 202 so far. */
  get accepted(): number {
    return this.requests.reduce((n, r) => n + (r.status === 202 ? r.count : 0), 0);
  }

  private async loop(connection: number): Promise<void> {
    let i = 0;
    while (this.running) {
      const container = `${this.runId}-c${connection}-${i++ % this.opts.containersPerConnection}`;
      const firstSeq = this.nextSeq.get(container) ?? 0;
      const count = this.opts.pointsPerRequest;
      this.nextSeq.set(container, firstSeq + count);
      const points = Array.from({ length: count }, (_, k) => ({
        container_id: container,
        lat: 51.9,
        lon: 4.4,
        timestamp: new Date(BASE_MS + (firstSeq + k) * 1000).toISOString(),
      }));
      const sent: SentRequest = { container, firstSeq, count, status: 0 };
      this.requests.push(sent);
      sent.status = await this.post(JSON.stringify(points));
      // After a refusal or an error, back off a little as Retry-After asks (keeps the log readable).
      const pause = sent.status === 202 ? this.opts.pauseMs : 100;
      if (pause > 0) await new Promise((r) => setTimeout(r, pause));
    }
  }

  private post(body: string): Promise<number> {
    return new Promise((resolve) => {
      const req = request(`${this.url}/track`, { method: 'POST', agent: this.agent, headers: { 'content-type': 'application/json' } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode!));
        res.on('error', () => resolve(0));
      });
      req.setTimeout(this.opts.requestTimeoutMs, () => {
        req.destroy();
        resolve(-1);
      });
      req.on('error', (err: NodeJS.ErrnoException) => {
        this.errorCodes[err.code ?? err.message] = (this.errorCodes[err.code ?? err.message] ?? 0) + 1;
        resolve(0);
      });
      req.end(body);
    });
  }

  /** Compares what was answered with what the topic holds (messages of other runs are ignored). */
  account(messages: readonly ConsumedMessage[]): Accounting {
    // container → seq → offsets seen (in partition order)
    const seen = new Map<string, Map<number, { partition: number; offset: number }[]>>();
    let found = 0;
    for (const m of messages) {
      if (!m.key.startsWith(this.runId + '-')) continue;
      found++;
      const seq = (Date.parse((JSON.parse(m.value) as { timestamp: string }).timestamp) - BASE_MS) / 1000;
      let bySeq = seen.get(m.key);
      if (bySeq === undefined) seen.set(m.key, (bySeq = new Map()));
      const at = bySeq.get(seq);
      if (at === undefined) bySeq.set(seq, [{ partition: m.partition, offset: m.offset }]);
      else at.push({ partition: m.partition, offset: m.offset });
    }
    const a: Accounting = {
      requests: this.requests.length,
      sent: 0,
      accepted: 0,
      rejected: 0,
      connectionErrors: 0,
      hangs: 0,
      found,
      lost: 0,
      duplicated: 0,
      unacknowledgedButDelivered: 0,
      deliveredAfterError: 0,
      reordered: 0,
      statuses: {},
    };
    for (const r of this.requests) {
      a.sent += r.count;
      const label = r.status === 0 ? 'connection error' : r.status === -1 ? 'no answer' : String(r.status);
      a.statuses[label] = (a.statuses[label] ?? 0) + 1;
      if (r.status === 0) a.connectionErrors++;
      if (r.status === -1) a.hangs++;
      const bySeq = seen.get(r.container);
      let previous = -1;
      let inOrder = true;
      for (let s = r.firstSeq; s < r.firstSeq + r.count; s++) {
        const copies = bySeq?.get(s);
        if (r.status === 202) {
          if (copies === undefined) a.lost++;
          else {
            a.duplicated += copies.length - 1;
            if (copies[0]!.offset <= previous) inOrder = false;
            previous = copies[0]!.offset;
          }
        } else if (copies !== undefined) {
          a.unacknowledgedButDelivered += copies.length;
          if (r.status >= 400) a.deliveredAfterError += copies.length;
        }
      }
      if (r.status === 202) {
        a.accepted += r.count;
        if (!inOrder) a.reordered++;
      } else if (r.status > 0) {
        a.rejected += r.count;
      }
    }
    return a;
  }
}

/** One row of the README's reliability tables. */
export function accountingRow(scenario: string, a: Accounting): string {
  const statuses = Object.entries(a.statuses)
    .map(([s, n]) => `${s}×${n}`)
    .join(' ');
  return `| ${scenario} | ${a.sent} | ${a.accepted} | ${a.rejected} | ${a.found} | ${a.lost} | ${a.duplicated} | ${a.reordered} | ${statuses} |`;
}

export const ACCOUNTING_HEADER =
  '| scenario | points sent | accepted (202) | refused (500) | found in Kafka | lost | duplicated | requests out of order | requests by answer |\n|---|---|---|---|---|---|---|---|---|';

/** The promise of every fault test: each accepted point in Kafka once, in order, and no request left hanging. */
export function expectEveryAcceptedPointOnce(a: Accounting, minAccepted: number): void {
  expect(a.accepted).toBeGreaterThan(minAccepted);
  expect(a.lost).toBe(0);
  expect(a.duplicated).toBe(0);
  expect(a.reordered).toBe(0);
  expect(a.hangs).toBe(0);
}
