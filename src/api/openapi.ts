// The OpenAPI 3.1 description of the HTTP API, generated from the zod schema of a track point and
// the error catalogue, so that neither is written twice. Served at GET /openapi.json and checked in
// as openapi.json (`make openapi`); a test compares the two and checks the document against the validator.
import { z } from 'zod';
import { codesWithStatus, ERROR_CODES } from './errors.js';
import { TRACK_PATH } from './routes.js';
import { TrackPointSchema } from '../track-point/schema.js';

export function buildOpenApi(limits: { maxPoints: number; maxBodyBytes: number }) {
  const point = z.toJSONSchema(TrackPointSchema, { io: 'input', target: 'draft-2020-12' });
  delete (point as { $schema?: string }).$schema;
  const error = {
    type: 'object',
    required: ['error', 'message'],
    properties: {
      error: { type: 'string', enum: ERROR_CODES },
      message: { type: 'string' },
      details: {
        type: 'array',
        maxItems: 100,
        items: {
          type: 'object',
          required: ['index', 'message'],
          properties: { index: { type: 'integer', minimum: 0 }, field: { type: 'string' }, message: { type: 'string' } },
        },
      },
    },
  };
  // Each error response names the codes the catalogue answers with that status.
  const errorResponse = (status: number, description: string, headers?: Record<string, unknown>) => ({
    description: `${codesWithStatus(status).join(' or ')}: ${description}`,
    ...(headers === undefined ? {} : { headers }),
    content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
  });
  return {
    openapi: '3.1.0',
    info: {
      title: 'Container telemetry ingestion',
      version: '1',
      description: 'Accepts GPS track points of shipping containers and writes one Kafka message per point, keyed by container_id.',
    },
    paths: {
      [TRACK_PATH]: {
        post: {
          summary: 'Submit track points',
          description: `All or nothing: either every point of the request is accepted, or none. At most ${limits.maxPoints} points and ${limits.maxBodyBytes} bytes (after gunzip) per request.`,
          parameters: [{ name: 'Content-Encoding', in: 'header', required: false, schema: { type: 'string', enum: ['gzip', 'identity'] } }],
          requestBody: {
            required: true,
            content: { 'application/json': { schema: { type: 'array', maxItems: limits.maxPoints, items: { $ref: '#/components/schemas/TrackPoint' } } } },
          },
          responses: {
            '202': {
              description:
                "Accepted: every point is in the worker's write-ahead journal (JOURNAL_SYNC=process: written to the OS, survives a crash of the process; disk: also on the disk) and goes to Kafka from there, at least once. With ACK_MODE=delivered, Kafka has acknowledged every point.",
              content: {
                'application/json': { schema: { type: 'object', required: ['accepted'], properties: { accepted: { type: 'integer', minimum: 0 } } } },
              },
            },
            '400': errorResponse(400, 'the body is not JSON, not an array, or a point is invalid; nothing from the request is produced.'),
            '405': errorResponse(405, 'the Allow header says POST.', { Allow: { schema: { type: 'string' } } }),
            '413': errorResponse(413, 'body over MAX_BODY_BYTES or more than MAX_POINTS points.'),
            '415': errorResponse(415, 'Content-Type other than application/json or an encoding other than gzip.'),
            '500': errorResponse(
              500,
              'nothing of the request was taken, and the code says why (backpressure, an outage, shutdown...): resend it after Retry-After; or, with ACK_MODE=delivered, Kafka did not acknowledge every point within DELIVERY_TIMEOUT_MS: delivery_failed when none was written (resend), delivery_uncertain when some were or may have been (a resend may duplicate them).',
              {
                'Retry-After': { schema: { type: 'integer' } },
              },
            ),
          },
        },
      },
      '/healthz': { get: { summary: 'Liveness', responses: { '200': { description: 'The process serves.' } } } },
      '/readyz': {
        get: {
          summary: 'Readiness',
          responses: { '200': { description: 'Connected to a broker with the topic metadata.' }, '503': { description: 'Not ready; the body says why.' } },
        },
      },
      '/metrics': { get: { summary: 'Prometheus metrics of all workers', responses: { '200': { description: 'Prometheus text format 0.0.4.' } } } },
    },
    components: { schemas: { TrackPoint: point, Error: error } },
  };
}
