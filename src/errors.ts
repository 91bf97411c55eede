// The closed catalogue of error answers: every `error` code the API can answer, with its HTTP status.
// An answer is made from a code and a message (errorAnswer); its status, the `reason` label of the
// rejection metrics and the error responses of the OpenAPI document all come from this table. A test
// checks that the README's table lists each code. Bodies are JSON:
//   {"error": "validation_failed", "message": "2 invalid track points", "details": [...]}

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

export const ERROR_STATUS = {
  invalid_json: 400,
  validation_failed: 400,
  not_found: 404,
  method_not_allowed: 405,
  payload_too_large: 413,
  unsupported_media_type: 415,
  broker_unavailable: 500,
  delivery_failed: 500,
} as const satisfies Record<string, HttpStatus>;

export type ErrorCode = keyof typeof ERROR_STATUS;

/** The codes a refused POST /track can carry: the `reason` label of ingest_points_rejected_total. */
export const TRACK_REJECTIONS = [
  'invalid_json',
  'validation_failed',
  'payload_too_large',
  'unsupported_media_type',
  'broker_unavailable',
  'delivery_failed',
] as const satisfies readonly ErrorCode[];

export type TrackRejection = (typeof TRACK_REJECTIONS)[number];

/** One rejected field of one point. `field` is absent when the element itself is wrong (not an object). */
export interface PointIssue {
  index: number;
  field?: string;
  message: string;
}

/** At most this many entries in `details`: a 10,000-point garbage body must not produce a 2 MB answer. */
export const MAX_ERROR_DETAILS = 100;

/** An error answer: the status is the catalogue's for the code. */
export interface ErrorAnswer<C extends ErrorCode = ErrorCode> {
  status: (typeof ERROR_STATUS)[C];
  code: C;
  body: string;
}

export function errorAnswer<C extends ErrorCode>(code: C, message: string, details?: readonly PointIssue[]): ErrorAnswer<C> {
  const body = JSON.stringify(details === undefined ? { error: code, message } : { error: code, message, details });
  return { status: ERROR_STATUS[code], code, body };
}

/** The codes answered with this status, in catalogue order (the OpenAPI document lists them). */
export function codesWithStatus(status: number): ErrorCode[] {
  return (Object.keys(ERROR_STATUS) as ErrorCode[]).filter((code) => ERROR_STATUS[code] === status);
}
