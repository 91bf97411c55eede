// The closed catalogue of error answers: every `error` code a client can receive, from the service
// or from the reference gateway in front of it, with its HTTP status, its Retry-After, what it means
// and whether resending the request is safe. The service's answers, the `reason` label of the
// refusal metrics, the OpenAPI document's error responses and the README's error table all come from
// this table; a test holds the gateway's files (deploy/gateway) to it. Bodies are JSON:
//   {"error": "validation_failed", "message": "2 invalid track points", "details": [...]}

import type { PointIssue } from '../track-point/schema.js';

/** Every status the service answers with, and its status line (uWS wants the whole line). */
export const STATUS_LINE = {
  200: '200 OK',
  202: '202 Accepted',
  400: '400 Bad Request',
  404: '404 Not Found',
  405: '405 Method Not Allowed',
  413: '413 Payload Too Large',
  415: '415 Unsupported Media Type',
  500: '500 Internal Server Error',
  503: '503 Service Unavailable',
} as const;

export type HttpStatus = keyof typeof STATUS_LINE;

/** Who answers with a code: the service, the reference gateway (nginx or HAProxy), or both. */
export type AnsweredBy = 'service' | 'gateway' | 'both';

/**
 * What a client may do after the answer: `fix` the request (resending it unchanged gets the same
 * answer), `resend` it after Retry-After (nothing of it was taken), or `check` first: some of its
 * points may be in Kafka already, and a resend may duplicate them.
 */
export type Resend = 'fix' | 'resend' | 'check';

export interface CatalogueEntry {
  status: number;
  by: AnsweredBy;
  /** Seconds, sent as the Retry-After header; absent: no header. */
  retryAfter?: number;
  resend: Resend;
  /** When it is answered, in one sentence. */
  when: string;
}

/**
 * The catalogue. Every 5xx of the service means that nothing of the request was taken, except
 * delivery_uncertain (ACK_MODE=delivered, some points may be in Kafka). Statuses keep to the spec: a
 * write to the broker that cannot be made is a 500, whatever the reason.
 */
export const CATALOGUE = {
  invalid_json: {
    status: 400,
    by: 'service',
    resend: 'fix',
    when: 'The body is not valid JSON (also empty, invalid UTF-8, trailing garbage, not valid gzip).',
  },
  validation_failed: {
    status: 400,
    by: 'service',
    resend: 'fix',
    when: 'The body is not an array, or a point fails validation (`details` says which and why); nothing of the request is produced.',
  },
  bad_request: {
    status: 400,
    by: 'gateway',
    resend: 'fix',
    when: 'The request is not valid HTTP/1.x (duplicate Content-Length, Content-Length with Transfer-Encoding, a malformed request line).',
  },
  api_key_required: {
    status: 401,
    by: 'gateway',
    resend: 'fix',
    when: 'The reference gateway requires API keys (GATEWAY_API_KEYS=required) and the request has no X-Api-Key.',
  },
  api_key_invalid: {
    status: 401,
    by: 'gateway',
    resend: 'fix',
    when: 'The X-Api-Key is not one the gateway knows, or it was revoked (scripts/gateway-keys.sh).',
  },
  not_found: { status: 404, by: 'both', resend: 'fix', when: 'Unknown path (the gateway serves only /track).' },
  method_not_allowed: {
    status: 405,
    by: 'service',
    resend: 'fix',
    when: 'A method other than POST on /track (header Allow: POST), or other than GET elsewhere.',
  },
  idempotency_key_invalid: {
    status: 400,
    by: 'gateway',
    resend: 'fix',
    when: 'The Idempotency-Key header is empty, over 255 characters, or not printable ASCII.',
  },
  request_timeout: { status: 408, by: 'gateway', resend: 'resend', when: "The request's headers or body did not arrive within 10 s." },
  idempotency_key_in_flight: {
    status: 409,
    by: 'gateway',
    retryAfter: 1,
    resend: 'resend',
    when: 'A request with the same Idempotency-Key (for the same API key) is still being answered: resend after Retry-After to get its answer.',
  },
  payload_too_large: {
    status: 413,
    by: 'both',
    resend: 'fix',
    when: "Body over MAX_BODY_BYTES (after gunzip), more than MAX_POINTS points, or a point larger than Kafka's message size limit.",
  },
  unsupported_media_type: {
    status: 415,
    by: 'service',
    resend: 'fix',
    when: 'Content-Type other than application/json, or Content-Encoding other than gzip or identity.',
  },
  idempotency_key_reused: {
    status: 422,
    by: 'gateway',
    resend: 'fix',
    when: 'The Idempotency-Key was used, within GATEWAY_IDEMPOTENCY_WINDOW_S, for a request with another body: a new request needs a new key.',
  },
  rate_limited: {
    status: 429,
    by: 'gateway',
    retryAfter: 1,
    resend: 'resend',
    when: "More requests in one second than this client's limit: its API key's, else GATEWAY_RATE_LIMIT (per address when keys are off).",
  },
  request_header_too_large: { status: 431, by: 'gateway', resend: 'fix', when: 'A header block over 4 lines of 8 KiB.' },
  queue_full: {
    status: 500,
    by: 'service',
    retryAfter: 1,
    resend: 'resend',
    when: 'Backpressure: Kafka takes points more slowly than they arrive (or refuses some, which are produced again); the request waited QUEUE_FULL_WAIT_MS for room in the producer queue and found none.',
  },
  journal_full: {
    status: 500,
    by: 'service',
    retryAfter: 1,
    resend: 'resend',
    when: 'The write-ahead journal (every accepted point until Kafka acknowledged it) is full (JOURNAL_MAX_BYTES) or its disk is (a write refused for room); /readyz says which.',
  },
  journal_failed: {
    status: 500,
    by: 'service',
    retryAfter: 1,
    resend: 'check',
    when: 'The disk under the write-ahead journal failed a write or a sync (an I/O error): the worker stops taking points, is restarted and recovers what the disk holds. A request that waited for that sync (JOURNAL_SYNC=disk) may still reach Kafka: a resend may duplicate it.',
  },
  broker_unavailable: {
    status: 500,
    by: 'service',
    retryAfter: 1,
    resend: 'resend',
    when: 'No Kafka broker reachable: not connected yet, or none for BROKER_DOWN_GRACE_MS.',
  },
  broker_stalled: {
    status: 500,
    by: 'service',
    retryAfter: 1,
    resend: 'resend',
    when: 'Kafka brokers keep their connections but have answered nothing for BROKER_DOWN_GRACE_MS (a frozen broker).',
  },
  topic_unknown: { status: 500, by: 'service', retryAfter: 1, resend: 'resend', when: 'The topic MQ_TOPIC does not exist or has no leader.' },
  schema_unknown: {
    status: 500,
    by: 'service',
    retryAfter: 1,
    resend: 'resend',
    when: "MQ_VALUE_FORMAT other than json: the Schema Registry (SCHEMA_REGISTRY_URL) has not given the value schema's id yet; /readyz says why.",
  },
  producer_failed: {
    status: 500,
    by: 'service',
    retryAfter: 1,
    resend: 'resend',
    when: "This worker's Kafka producer hit a fatal error (it is being replaced) or refused the points.",
  },
  shutting_down: {
    status: 500,
    by: 'service',
    retryAfter: 1,
    resend: 'resend',
    when: 'This worker is shutting down (a deploy or scale-down); another one takes the resend.',
  },
  delivery_failed: {
    status: 500,
    by: 'service',
    retryAfter: 1,
    resend: 'resend',
    when: "ACK_MODE=delivered: Kafka did not take the request's points within DELIVERY_TIMEOUT_MS, and none of them was written.",
  },
  delivery_uncertain: {
    status: 500,
    by: 'service',
    retryAfter: 1,
    resend: 'check',
    when: 'ACK_MODE=delivered: not every point was acknowledged within DELIVERY_TIMEOUT_MS, and some were or may have been written (sent, no answer): a resend may duplicate them.',
  },
  gateway_error: { status: 500, by: 'gateway', resend: 'resend', when: 'The gateway itself failed to handle the request.' },
  service_unreachable: { status: 502, by: 'gateway', retryAfter: 1, resend: 'resend', when: 'The gateway cannot reach the service (down or restarting).' },
  service_unavailable: { status: 503, by: 'gateway', retryAfter: 1, resend: 'resend', when: "No ready service instance (HAProxy's readiness check)." },
  service_timeout: {
    status: 504,
    by: 'gateway',
    retryAfter: 1,
    resend: 'check',
    when: 'The service did not answer within 15 s; the request may have been taken.',
  },
  http_version_not_supported: { status: 505, by: 'gateway', resend: 'fix', when: 'HTTP/1.0 through the HAProxy example (the nginx gateway serves it).' },
} as const satisfies Record<string, CatalogueEntry>;

export type CatalogueCode = keyof typeof CATALOGUE;

/** The codes the service itself answers with (the gateway's own are in the catalogue too). */
export type ErrorCode = { [C in CatalogueCode]: (typeof CATALOGUE)[C]['by'] extends 'gateway' ? never : C }[CatalogueCode];

export const ERROR_CODES = (Object.keys(CATALOGUE) as CatalogueCode[]).filter((code): code is ErrorCode => CATALOGUE[code].by !== 'gateway');

/** The status of each code the service answers with. */
export const ERROR_STATUS = Object.fromEntries(ERROR_CODES.map((code) => [code, CATALOGUE[code].status])) as {
  [C in ErrorCode]: (typeof CATALOGUE)[C]['status'];
};

/** The codes a refused POST /track can carry: the `reason` label of the refusal metrics. */
export const TRACK_REJECTIONS = ERROR_CODES.filter((code): code is TrackRejection => code !== 'not_found' && code !== 'method_not_allowed');
export type TrackRejection = Exclude<ErrorCode, 'not_found' | 'method_not_allowed'>;

/** An error answer: the status and Retry-After are the catalogue's for the code. */
export interface ErrorAnswer<C extends ErrorCode = ErrorCode> {
  status: (typeof CATALOGUE)[C]['status'];
  code: C;
  body: string;
  retryAfter?: number;
}

export function errorAnswer<C extends ErrorCode>(code: C, message: string, details?: readonly PointIssue[]): ErrorAnswer<C> {
  const body = errorBody(code, message, details);
  const entry: CatalogueEntry = CATALOGUE[code];
  const status = CATALOGUE[code].status;
  return entry.retryAfter === undefined ? { status, code, body } : { status, code, body, retryAfter: entry.retryAfter };
}

/**
 * JSON.stringify({ error, message, details }), written out: the same bytes (a test holds it to them).
 * Under a flood of invalid points, stringifying the object was the largest part of a refusal's own
 * work; its strings are still JSON.stringify's.
 */
function errorBody(code: string, message: string, details: readonly PointIssue[] | undefined): string {
  let body = `{"error":${JSON.stringify(code)},"message":${JSON.stringify(message)}`;
  if (details === undefined) return `${body}}`;
  body += ',"details":[';
  for (let i = 0; i < details.length; i++) {
    const { index, field, message: why } = details[i] as PointIssue;
    body += `${i === 0 ? '' : ','}{"index":${JSON.stringify(index)}${field === undefined ? '' : `,"field":${JSON.stringify(field)}`},"message":${JSON.stringify(why)}}`;
  }
  return `${body}]}`;
}

/** The codes the service answers with this status, in catalogue order (the OpenAPI document lists them). */
export function codesWithStatus(status: number): ErrorCode[] {
  return ERROR_CODES.filter((code) => CATALOGUE[code].status === status);
}

/**
 * Why the write-ahead path takes nothing of a request now, each a code of the catalogue: the broker
 * state's reasons (kafka/broker-state.ts), the producer queue's and the journal's.
 */
export const PRODUCER_REFUSALS = [
  'queue_full',
  'journal_full',
  'journal_failed',
  'broker_unavailable',
  'broker_stalled',
  'topic_unknown',
  'schema_unknown',
  'producer_failed',
  'shutting_down',
] as const satisfies readonly ErrorCode[];
export type ProducerRefusal = (typeof PRODUCER_REFUSALS)[number];

/** What the refusals' messages name: the settings an operator reading the answer would look at. */
export interface RefusalContext {
  brokers: string;
  topic: string;
  brokerDownGraceMs: number;
  queueFullWaitMs: number;
}

/** The message of each producer refusal; every one ends saying that nothing was taken. */
export function refusalMessage(refusal: ProducerRefusal, c: RefusalContext): string {
  const nothing = 'nothing from this request was accepted';
  switch (refusal) {
    case 'queue_full':
      return `the producer queue is full: Kafka takes points more slowly than they arrive, and no room came within ${c.queueFullWaitMs} ms (QUEUE_FULL_WAIT_MS); ${nothing}`;
    case 'journal_full':
      return `the journal, which keeps every accepted point until Kafka acknowledged it, is full (JOURNAL_MAX_BYTES) or its disk is; ${nothing}`;
    case 'journal_failed':
      return `the disk under this worker's journal failed (an I/O error): the worker is being restarted; ${nothing}`;
    case 'broker_unavailable':
      return `no Kafka broker of ${c.brokers} can be reached (not connected yet, or none for more than ${c.brokerDownGraceMs} ms); ${nothing}`;
    case 'broker_stalled':
      return `the Kafka brokers have answered nothing for more than ${c.brokerDownGraceMs} ms while requests wait; ${nothing}`;
    case 'topic_unknown':
      return `topic ${c.topic} does not exist or has no leader; ${nothing}`;
    case 'schema_unknown':
      return `the Schema Registry has not given the value schema's id yet (SCHEMA_REGISTRY_URL; /readyz says why); ${nothing}`;
    case 'producer_failed':
      return `this worker's Kafka producer failed (a fatal error, or librdkafka refused the points); ${nothing}`;
    case 'shutting_down':
      return `this worker is shutting down; ${nothing}`;
  }
}

const RESEND_TEXT: Record<Resend, string> = {
  fix: 'no: fix the request',
  resend: 'yes: nothing was taken',
  check: 'may duplicate: some points may be in Kafka',
};

/** The catalogue entry as a row of the README's error table: code, status, by, Retry-After, resend, when. */
export function catalogueRow(code: CatalogueCode): string {
  const e: CatalogueEntry = CATALOGUE[code];
  return `| \`${code}\` | ${e.status} | ${e.by} | ${e.retryAfter ?? ''} | ${RESEND_TEXT[e.resend]} | ${e.when} |`;
}
