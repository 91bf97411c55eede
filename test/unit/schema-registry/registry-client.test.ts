// The registry client's authentication and TLS, which the local Apicurio (no authentication, plain
// HTTP) cannot show: against an https server of this test's own, with a certificate of a CA made here
// (openssl), that answers Confluent's register call only with the right Authorization header.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig, type SchemaRegistry } from '../../../src/config.js';
import { RegistryClient, RegistryRefusal, RegistryUnavailable } from '../../../src/schema-registry/registry-client.js';

const dir = mkdtempSync(join(tmpdir(), 'registry-tls-'));
const cert = join(dir, 'cert.pem');
let server: Server;
let url: string;
const seen: { path: string; authorization: string | undefined; body: string }[] = [];

beforeAll(async () => {
  // A self-signed certificate for 127.0.0.1: its own CA.
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', join(dir, 'key.pem'), '-out', cert,
  ], { stdio: 'ignore' }); // prettier-ignore
  server = createServer({ key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(cert) }, (req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      seen.push({ path: req.url ?? '', authorization: req.headers.authorization, body });
      const ok = req.headers.authorization === `Basic ${Buffer.from('fleet:secret').toString('base64')}` || req.headers.authorization === 'Bearer tok';
      res.writeHead(ok ? 200 : 401, { 'content-type': 'application/json' });
      res.end(ok ? '{"id":42}' : '{"error_code":40101,"message":"Unauthorized"}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `https://127.0.0.1:${(server.address() as { port: number }).port}/apis/ccompat/v7`;
});

afterAll(() => {
  server.close();
});

const registry = (env: Record<string, string>): SchemaRegistry =>
  loadConfig({ MQ_VALUE_FORMAT: 'avro', SCHEMA_REGISTRY_URL: url, SCHEMA_REGISTRY_CA: cert, MQ_TOPIC: 'points', ...env }).schemaRegistry!;

describe('the Schema Registry client', () => {
  it('registers over TLS with the CA of SCHEMA_REGISTRY_CA, with basic or bearer authentication', async () => {
    expect(await new RegistryClient(registry({ SCHEMA_REGISTRY_USER: 'fleet', SCHEMA_REGISTRY_PASSWORD: 'secret' })).register('{}', 'AVRO')).toEqual({
      id: 42,
    });
    expect(await new RegistryClient(registry({ SCHEMA_REGISTRY_TOKEN: 'tok' })).register('{}', 'AVRO')).toEqual({ id: 42 });
    const last = seen.at(-1);
    expect(last?.path).toBe('/apis/ccompat/v7/subjects/points-value/versions');
    expect(JSON.parse(last?.body ?? '{}')).toEqual({ schema: '{}', schemaType: 'AVRO' });
  });

  it('takes a wrong credential for a refusal (no retry heals it), and a certificate it cannot check for the registry unavailable', async () => {
    const wrong = new RegistryClient(registry({ SCHEMA_REGISTRY_USER: 'fleet', SCHEMA_REGISTRY_PASSWORD: 'guess' }));
    await expect(wrong.register('{}', 'AVRO')).rejects.toSatisfy((err) => err instanceof RegistryRefusal && err.status === 401);
    const withoutCa = new RegistryClient({ ...registry({ SCHEMA_REGISTRY_TOKEN: 'tok' }), caFile: null });
    await expect(withoutCa.register('{}', 'AVRO')).rejects.toBeInstanceOf(RegistryUnavailable);
  });
});
