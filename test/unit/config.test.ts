import { describe, expect, it } from 'vitest';
import { ConfigError, DEFAULTS, loadConfig, producerOptionsFrom, transactionalId } from '../../src/config.js';
import { usableCpus } from '../../src/host-resources.js';

describe('configuration', () => {
  it('has the defaults of the spec', () => {
    const c = loadConfig({});
    expect(c.brokers).toBe('localhost:9092');
    expect(c.topic).toBe('container.telemetry');
    expect(c.listen).toEqual({ host: '', port: 8080 });
    expect(c.maxBodyBytes).toBe(1024 * 1024);
    expect(c.maxPoints).toBe(10_000);
    expect(c.workers).toBe(usableCpus());
    expect(Object.isFrozen(c)).toBe(true);
  });

  it.each([
    [':8080', { host: '', port: 8080 }],
    ['0.0.0.0:8080', { host: '0.0.0.0', port: 8080 }],
    ['127.0.0.1:9000', { host: '127.0.0.1', port: 9000 }],
    ['[::1]:8080', { host: '::1', port: 8080 }],
    ['[::]:80', { host: '::', port: 80 }],
    ['localhost:8080', { host: 'localhost', port: 8080 }],
  ])('reads LISTEN_ADDR %s', (value, expected) => {
    expect(loadConfig({ LISTEN_ADDR: value }).listen).toEqual(expected);
  });

  it.each([
    ['LISTEN_ADDR', '8080'],
    ['LISTEN_ADDR', ':0'],
    ['LISTEN_ADDR', ':70000'],
    ['LISTEN_ADDR', '::1:8080'],
    ['MAX_POINTS', 'abc'],
    ['MAX_POINTS', '0'],
    ['MAX_HEADER_BYTES', '512'], // below what any request's headers take
    ['MAX_BODY_BYTES', '-5'],
    ['MAX_BODY_BYTES', '1.5'],
    ['WORKERS', 'many'],
    ['WORKERS', '0'],
    ['MQ_TOPIC', 'bad topic'],
    ['MQ_BROKERS', 'no-port'],
    ['LOG_LEVEL', 'loud'],
    ['JOURNAL_SYNC_INTERVAL_MS', '1001'],
    ['PRODUCER_QUEUE_MAX_POINTS', '5'], // below MAX_POINTS
  ])('refuses %s=%s with an error naming the variable', (variable, value) => {
    let error: unknown;
    try {
      loadConfig({ [variable]: value });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).variable).toBe(variable);
    expect((error as ConfigError).message).toMatch(new RegExp(`^${variable}: `));
  });

  it('DELIVERY=exactly-once: the positions topic after MQ_TOPIC, the instance from POD_NAME, a transactional.id per slot', () => {
    const c = loadConfig({ DELIVERY: 'exactly-once', MQ_TOPIC: 'fleet.points', POD_NAME: 'track-ingest-2' });
    expect(c.exactlyOnce).toEqual({
      instance: 'track-ingest-2',
      positionsTopic: 'fleet.points.positions',
      commitIntervalMs: 100,
      maxPoints: 10_000,
      transactionTimeoutMs: 10_000,
    });
    expect(transactionalId(c.exactlyOnce!, 1)).toBe('track-ingest.track-ingest-2.1');
    expect(loadConfig({ DELIVERY: 'exactly-once', INSTANCE_ID: 'pod-a' }).exactlyOnce?.instance).toBe('pod-a');
    expect(loadConfig({}).exactlyOnce).toBeNull();
  });

  it.each([
    [{ DELIVERY: 'exactly-once', ACK_MODE: 'delivered' }, 'DELIVERY'],
    [{ DELIVERY: 'exactly-once', MQ_POSITIONS_TOPIC: 'container.telemetry' }, 'MQ_POSITIONS_TOPIC'],
    [{ DELIVERY: 'exactly-twice' }, 'DELIVERY'],
    [{ DELIVERY: 'exactly-once', TRANSACTION_COMMIT_INTERVAL_MS: '5000', TRANSACTION_TIMEOUT_MS: '5000' }, 'TRANSACTION_COMMIT_INTERVAL_MS'],
    [{ DELIVERY: 'exactly-once', INSTANCE_ID: 'pod a' }, 'INSTANCE_ID'],
  ])('refuses the exactly-once settings %j, naming %s', (env, variable) => {
    expect(() => loadConfig(env)).toThrow(expect.objectContaining({ variable }));
  });

  it('reads a registry value format: its subject by strategy, its authentication, json without any', () => {
    const url = 'http://registry:8080/apis/ccompat/v7/';
    expect(loadConfig({}).schemaRegistry).toBeNull();
    expect(loadConfig({ MQ_VALUE_FORMAT: 'avro', SCHEMA_REGISTRY_URL: url, MQ_TOPIC: 'points' }).schemaRegistry).toEqual({
      format: 'avro',
      url: 'http://registry:8080/apis/ccompat/v7',
      authorization: null,
      caFile: null,
      subject: 'points-value',
    });
    const record = loadConfig({
      MQ_VALUE_FORMAT: 'protobuf',
      SCHEMA_REGISTRY_URL: url,
      SCHEMA_SUBJECT_STRATEGY: 'record',
      SCHEMA_REGISTRY_USER: 'u',
      SCHEMA_REGISTRY_PASSWORD: 'p',
    });
    expect(record.schemaRegistry?.subject).toBe('telemetry.TrackPoint');
    expect(record.schemaRegistry?.authorization).toBe(`Basic ${Buffer.from('u:p').toString('base64')}`);
    expect(loadConfig({ MQ_VALUE_FORMAT: 'json-schema', SCHEMA_REGISTRY_URL: url, SCHEMA_REGISTRY_TOKEN: 't' }).schemaRegistry?.authorization).toBe('Bearer t');
  });

  it.each([
    [{ MQ_VALUE_FORMAT: 'avro' }, 'SCHEMA_REGISTRY_URL'],
    [{ MQ_VALUE_FORMAT: 'xml' }, 'MQ_VALUE_FORMAT'],
    [{ MQ_VALUE_FORMAT: 'avro', SCHEMA_REGISTRY_URL: 'registry:8081' }, 'SCHEMA_REGISTRY_URL'],
    [{ MQ_VALUE_FORMAT: 'avro', SCHEMA_REGISTRY_URL: 'http://r', SCHEMA_REGISTRY_USER: 'u' }, 'SCHEMA_REGISTRY_PASSWORD'],
    [
      { MQ_VALUE_FORMAT: 'avro', SCHEMA_REGISTRY_URL: 'http://r', SCHEMA_REGISTRY_USER: 'u', SCHEMA_REGISTRY_PASSWORD: 'p', SCHEMA_REGISTRY_TOKEN: 't' },
      'SCHEMA_REGISTRY_TOKEN',
    ],
    [{ MQ_VALUE_FORMAT: 'avro', SCHEMA_REGISTRY_URL: 'http://r', SCHEMA_SUBJECT_STRATEGY: 'topic-record' }, 'SCHEMA_SUBJECT_STRATEGY'],
    [{ MQ_VALUE_FORMAT: 'avro', SCHEMA_REGISTRY_URL: 'https://r', SCHEMA_REGISTRY_CA: '/nonexistent/ca.pem' }, 'SCHEMA_REGISTRY_CA'],
  ])('refuses the registry settings %j, naming %s', (env, variable) => {
    expect(() => loadConfig(env)).toThrow(expect.objectContaining({ variable }));
  });

  it('treats an empty value as unset', () => {
    expect(loadConfig({ MQ_TOPIC: '', MAX_POINTS: ' ' }).topic).toBe(DEFAULTS.MQ_TOPIC);
  });

  it('translates MQ_OPT_* into librdkafka property names by the documented rule', () => {
    expect(
      producerOptionsFrom({
        MQ_OPT_SECURITY_PROTOCOL: 'SASL_SSL',
        MQ_OPT_SASL_MECHANISMS: 'PLAIN',
        MQ_OPT_COMPRESSION_TYPE: 'lz4',
        MQ_OPT_SOME__ODD_NAME: 'x',
        OTHER: 'ignored',
      }),
    ).toEqual({ 'security.protocol': 'SASL_SSL', 'sasl.mechanisms': 'PLAIN', 'compression.type': 'lz4', 'some_odd.name': 'x' });
  });
});
