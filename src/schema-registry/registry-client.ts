// The two calls the service makes to a Schema Registry (Confluent's REST API, which Apicurio serves
// under /apis/ccompat/v7): register the value's schema under its subject, which answers the id of
// the schema already registered when it is the same, and read the compatibility level that refused
// one. Node's own http and https: two calls at start need no client library.
import { readFileSync } from 'node:fs';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { SchemaRegistry } from '../config.js';

/** Each call gives up after this long: the registration tries again with a back-off. */
const REQUEST_TIMEOUT_MS = 5_000;

/** The registry cannot be asked now (unreachable, timed out, a 5xx): worth trying again. */
export class RegistryUnavailable extends Error {
  override name = 'RegistryUnavailable';
}

/** The registry answered no in a way that trying again will not change (4xx): the start stops. */
export class RegistryRefusal extends Error {
  override name = 'RegistryRefusal';
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

export type Registered = { id: number } | { incompatible: string };

interface Answer {
  status: number;
  body: string;
}

export class RegistryClient {
  private readonly ca: Buffer | undefined;

  constructor(private readonly registry: SchemaRegistry) {
    this.ca = registry.caFile === null ? undefined : readFileSync(registry.caFile);
  }

  /** Registers `schema` under the subject: its id, or the registry's message when the schema is incompatible (409). */
  async register(schema: string, schemaType: string): Promise<Registered> {
    const subject = encodeURIComponent(this.registry.subject);
    const answer = await this.call('POST', `/subjects/${subject}/versions`, JSON.stringify({ schema, schemaType }));
    if (answer.status === 409) return { incompatible: messageOf(answer.body) };
    const id = (parse(answer.body) as { id?: unknown } | null)?.id;
    if (answer.status !== 200 || typeof id !== 'number') throw this.refusal('registering the schema', answer);
    return { id };
  }

  /** The compatibility level that applies to the subject: its own, else the registry's. */
  async compatibility(): Promise<string> {
    const own = await this.call('GET', `/config/${encodeURIComponent(this.registry.subject)}?defaultToGlobal=true`);
    const level = (answer: Answer) => (parse(answer.body) as { compatibilityLevel?: unknown } | null)?.compatibilityLevel;
    if (own.status === 200 && typeof level(own) === 'string') return level(own) as string;
    const global = await this.call('GET', '/config');
    if (global.status === 200 && typeof level(global) === 'string') return level(global) as string;
    throw this.refusal('reading the compatibility level', global);
  }

  private refusal(what: string, answer: Answer): Error {
    const text = `${what} under subject ${this.registry.subject} at ${this.registry.url}: HTTP ${answer.status} ${messageOf(answer.body)}`;
    return answer.status >= 500 ? new RegistryUnavailable(text) : new RegistryRefusal(text, answer.status);
  }

  private call(method: 'GET' | 'POST', path: string, body?: string): Promise<Answer> {
    const url = new URL(this.registry.url + path);
    const headers: Record<string, string> = { accept: 'application/vnd.schemaregistry.v1+json, application/json' };
    if (body !== undefined) headers['content-type'] = 'application/vnd.schemaregistry.v1+json';
    if (this.registry.authorization !== null) headers.authorization = this.registry.authorization;
    return new Promise((resolve, reject) => {
      const onAnswer = (res: IncomingMessage) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', (err) => reject(new RegistryUnavailable(`${method} ${url.href}: ${err.message}`)));
      };
      const options = { method, headers, timeout: REQUEST_TIMEOUT_MS };
      const req = url.protocol === 'https:' ? httpsRequest(url, { ...options, ca: this.ca }, onAnswer) : httpRequest(url, options, onAnswer);
      req.on('timeout', () => req.destroy(new Error(`no answer within ${REQUEST_TIMEOUT_MS} ms`)));
      req.on('error', (err) => reject(new RegistryUnavailable(`${method} ${url.href}: ${err.message}`)));
      req.end(body);
    });
  }
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return null;
  }
}

/** The registry's error message (Confluent's { error_code, message }), else the body as it is. */
function messageOf(body: string): string {
  const message = (parse(body) as { message?: unknown } | null)?.message;
  return typeof message === 'string' ? message : body.slice(0, 500);
}
