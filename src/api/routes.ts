// The paths the service answers, in one place: the HTTP edge registers them, the metrics label them,
// the OpenAPI document describes them.

export const TRACK_PATH = '/track';

/** Read-only endpoints, answered to GET (any other method: 405 with Allow: GET). */
export const GET_PATHS = ['/healthz', '/readyz', '/metrics', '/openapi.json'] as const;
export type GetPath = (typeof GET_PATHS)[number];

/** `route` label values of the request metrics: the known paths, everything else is "other". */
export type Route = typeof TRACK_PATH | GetPath | 'other';
