// Requests refused for their content (400 invalid_json and validation_failed, 413, 415), kept where an
// operator can read them: one message each on MQ_REFUSED_TOPIC, a dead-letter topic. The devices log
// nothing of their 400s; this is how an operator sees which containers send bad points, which field is
// wrong and what the bodies looked like.
//
//   HTTP edge ─admit()─▶ over MQ_REFUSED_RATE? counted, dropped
//                ─keep(request)─▼
//              the body after gunzip, cut to MQ_REFUSED_MAX_BYTES, headers saying why ─▶ refused-producer.ts
//
// The message: the key is the body's first container_id when one can be read (a device's refusals stay
// on one partition); the value is the body; the headers carry the answer (code, status, message,
// details), the time, the client's address and API key name, and the sizes. Requests refused for the
// service's own state (500) are not kept: their points come back. Nothing here is journalled or
// retried: a refused body is evidence, not data, and it must never cost the accepted path anything.
import { createGunzip } from 'node:zlib';
import type { TrackRejection } from '../api/errors.js';
import type { RefusedTopic } from '../config.js';
import type { NotSent, RefusedMessage } from '../kafka/refused-producer.js';
import type { PointIssue } from '../track-point/schema.js';

/** Who sent a request, as far as the service can tell (config.ts, TRUST_GATEWAY_HEADERS). */
export interface RequestClient {
  readonly address: string;
  readonly apiKeyName: string | null;
}

/** One request refused for its content, as the HTTP edge saw it. */
export interface RefusedRequest {
  /** invalid_json, validation_failed, payload_too_large or unsupported_media_type. */
  readonly code: TrackRejection;
  readonly status: number;
  readonly message: string;
  readonly details?: readonly PointIssue[];
  /** The body as received (memory the caller may reuse once keep() returns), or null: not read. */
  readonly received: Uint8Array | null;
  /** The body after gunzip when it was decompressed whole, else null. */
  readonly decoded: Uint8Array | null;
  readonly gzipped: boolean;
  /** The body was not read to its end (it grew past MAX_BODY_BYTES). */
  readonly partial: boolean;
  /** Bytes the client sent: what was read, or the Content-Length of a body not read; null when unknown. */
  readonly sentBytes: number | null;
  readonly contentType: string;
  readonly contentEncoding: string;
  readonly client: RequestClient;
}

/** Where the messages go: kafka/refused-producer.ts. */
export interface RefusedSender {
  send(message: RefusedMessage): NotSent | null;
}

/** Why a refused request was not written: over the rate, or the producer's own refusals. */
export type Dropped = 'over_rate' | NotSent;

/** A key longer than this is cut: a refused body's container_id may be of any length. */
const KEY_MAX_CHARS = 256;
const CONTAINER_ID = /"container_id"\s*:\s*"((?:[^"\\]|\\.){0,256})"/;

export class RefusedRequests {
  private tokens: number;
  private refilledAt: number;

  constructor(
    private readonly settings: RefusedTopic,
    private readonly sender: RefusedSender,
    /** Names the process in every message: host and worker. */
    private readonly instance: string,
    /** Counts what was not written (ingest_refused_requests_dropped_total). */
    private readonly onDropped: (reason: Dropped) => void,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.tokens = settings.ratePerSecond;
    this.refilledAt = now();
  }

  /**
   * Whether the next refusal may be kept: a token of MQ_REFUSED_RATE, or counted over_rate. Asked
   * before anything of the request is gathered, so that a flood over the rate costs a comparison.
   */
  admit(): boolean {
    if (this.takeToken()) return true;
    this.onDropped('over_rate');
    return false;
  }

  /** Keeps one refused request that admit() let through. Copies what it keeps before it returns. */
  keep(request: RefusedRequest): void {
    const at = Date.now();
    const { received, decoded } = request;
    if (received !== null && request.gzipped && decoded === null) {
      // Not decompressed whole (larger than MAX_BODY_BYTES once inflated, not valid gzip, or not read
      // to its end): inflated here up to the cut, off the request's path.
      const copy = Buffer.copyBytesFrom(received);
      void gunzipPrefix(copy, this.settings.maxBytes).then((inflated) => this.send(request, at, inflated));
      return;
    }
    const body = decoded ?? received;
    this.send(
      request,
      at,
      body === null
        ? null
        : { bytes: Buffer.copyBytesFrom(body, 0, Math.min(body.byteLength, this.settings.maxBytes)), total: body.byteLength, inflated: request.gzipped },
    );
  }

  /** A token of the rate's bucket (MQ_REFUSED_RATE a second, as many at once at most). */
  private takeToken(): boolean {
    const now = this.now();
    const { ratePerSecond } = this.settings;
    this.tokens = Math.min(ratePerSecond, this.tokens + ((now - this.refilledAt) * ratePerSecond) / 1000);
    this.refilledAt = now;
    if (this.tokens < 1) return false;
    this.tokens--;
    return true;
  }

  private send(request: RefusedRequest, at: number, body: KeptBody | null): void {
    const notSent = this.sender.send(refusedMessage(request, at, body, this.settings.maxBytes, this.instance));
    if (notSent !== null) this.onDropped(notSent);
  }
}

/** What is kept of a body: its first bytes; `total` its whole size when known (null: inflating failed midway). */
interface KeptBody {
  readonly bytes: Buffer;
  readonly total: number | null;
  /** bytes are the body after gunzip (false: as received, gzip that could not be inflated). */
  readonly inflated: boolean;
}

/** The message of one refused request: exported for the unit test. */
export function refusedMessage(request: RefusedRequest, at: number, body: KeptBody | null, maxBytes: number, instance: string): RefusedMessage {
  const headers: Record<string, string>[] = [
    { 'refused.code': request.code },
    { 'refused.status': String(request.status) },
    { 'refused.message': request.message },
  ];
  if (request.details !== undefined && request.details.length > 0) headers.push({ 'refused.details': JSON.stringify(request.details) });
  headers.push({ 'refused.at': new Date(at).toISOString() }, { 'client.address': request.client.address });
  if (request.client.apiKeyName !== null) headers.push({ 'client.api_key_name': request.client.apiKeyName });
  if (request.contentType !== '') headers.push({ 'content.type': request.contentType });
  if (request.contentEncoding !== '') headers.push({ 'content.encoding': request.contentEncoding });
  if (request.sentBytes !== null) headers.push({ 'body.sent_bytes': String(request.sentBytes) });
  if (body !== null && body.total !== null && body.inflated) headers.push({ 'body.bytes': String(body.total) });
  headers.push({ 'body.kept': keptState(request, body, maxBytes) }, { 'service.instance': instance });
  const value = body === null ? Buffer.alloc(0) : body.bytes;
  return { key: body === null ? null : firstContainerId(value), value, headers, timestamp: at };
}

/** What the value holds, in words an operator reads in `make refused`. */
function keptState(request: RefusedRequest, body: KeptBody | null, maxBytes: number): string {
  if (body === null) return 'none: refused from its headers, the body was not read';
  if (request.gzipped && !body.inflated) return `as received, ${body.bytes.byteLength} bytes: not valid gzip`;
  const of = body.total === null ? '' : ` of ${body.total}`;
  if (request.partial) return `the first ${body.bytes.byteLength}${of} bytes read: the rest was not read (over MAX_BODY_BYTES)`;
  if (body.total !== null && body.bytes.byteLength >= body.total) return 'whole';
  return `cut to ${body.bytes.byteLength}${of} bytes (MQ_REFUSED_MAX_BYTES=${maxBytes})`;
}

/** The first container_id of a body, when its text has one: the message's key. */
export function firstContainerId(body: Buffer): string | null {
  const m = CONTAINER_ID.exec(body.toString('utf8'));
  if (m === null) return null;
  try {
    const id = JSON.parse(`"${m[1]!}"`) as string;
    return id.slice(0, KEY_MAX_CHARS);
  } catch {
    return m[1]!.slice(0, KEY_MAX_CHARS);
  }
}

/**
 * Up to `max` bytes of a gzip body, inflated: what came out before the end, the limit or an error
 * (a body cut short still shows its beginning). Nothing came out: the body as received.
 */
function gunzipPrefix(raw: Buffer, max: number): Promise<KeptBody> {
  return new Promise((resolve) => {
    const gunzip = createGunzip();
    const chunks: Buffer[] = [];
    let length = 0;
    let settled = false;
    const finish = (complete: boolean) => {
      if (settled) return;
      settled = true;
      gunzip.destroy();
      if (length === 0 && !complete) return resolve({ bytes: raw.subarray(0, max), total: raw.byteLength, inflated: false });
      const bytes = Buffer.concat(chunks, length).subarray(0, max);
      resolve({ bytes, total: complete ? length : null, inflated: true });
    };
    gunzip.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      length += chunk.byteLength;
      if (length > max) finish(false);
    });
    gunzip.on('end', () => finish(true));
    gunzip.on('error', () => finish(false));
    gunzip.end(raw);
  });
}
