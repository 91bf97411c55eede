// The closed catalogue of error responses: every `error` code the API can answer, with its HTTP status.
// A test checks that the README's table lists each code. Bodies are JSON:
//   {"error": "validation_failed", "message": "2 invalid track points", "details": [...]}

export const ERROR_STATUS = {
  invalid_json: 400,
  validation_failed: 400,
  not_found: 404,
  method_not_allowed: 405,
  payload_too_large: 413,
  unsupported_media_type: 415,
  broker_unavailable: 500,
  delivery_failed: 500,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

/** uWS wants the whole status line. */
export const STATUS_LINE: Readonly<Record<number, string>> = {
  200: '200 OK',
  202: '202 Accepted',
  400: '400 Bad Request',
  404: '404 Not Found',
  405: '405 Method Not Allowed',
  413: '413 Payload Too Large',
  415: '415 Unsupported Media Type',
  500: '500 Internal Server Error',
  503: '503 Service Unavailable',
};

/** One rejected field of one point. `field` is absent when the element itself is wrong (not an object). */
export interface PointIssue {
  index: number;
  field?: string;
  message: string;
}

/** At most this many entries in `details`: a 10,000-point garbage body must not produce a 2 MB answer. */
export const MAX_ERROR_DETAILS = 100;

export function errorBody(code: ErrorCode, message: string, details?: readonly PointIssue[]): string {
  return JSON.stringify(details === undefined ? { error: code, message } : { error: code, message, details });
}
