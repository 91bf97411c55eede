// The delivery sink as the HTTP edge sees it while a registry value format waits for its schema id:
// nothing is taken (schema_unknown) and /readyz says why, until the registration has the id.
import type { PointSink } from '../write-ahead/acceptance.js';
import type { SchemaRegistration } from './registration.js';

export function gatedOnSchema(sink: PointSink, registration: SchemaRegistration): PointSink {
  return {
    admission: () => (registration.framing === null ? 'schema_unknown' : sink.admission()),
    // The body was decoded with the framing admission() saw, which once set never changes.
    accept: (batch) => (registration.framing === null ? 'schema_unknown' : sink.accept(batch)),
    readiness: () => (registration.framing === null ? { ready: false, reason: registration.reason } : sink.readiness()),
  };
}
