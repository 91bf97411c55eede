// `make consume` with MQ_VALUE_FORMAT avro, protobuf or json-schema: what MQ_TOPIC holds from its
// start, each value decoded by Confluent's deserializer with the registry (SCHEMA_REGISTRY_URL, else
// the local one of scripts/registry.sh), one line per message: key, partition, timestamp, the value
// as JSON. Stops once nothing new came for KAFKA_CONSUME_TIMEOUT_MS (5000), or after KAFKA_CONSUME_MAX.
// (MQ_VALUE_FORMAT=json: scripts/kafka.sh consume, Kafka's own console consumer.)
import Kafka from '@confluentinc/kafka-javascript';
import { loadConfig } from '../src/config.js';
import { registryDecoder } from './registry-decode.js';

const env = process.env;
const local = 'http://127.0.0.1:8081/apis/ccompat/v7';
const config = loadConfig({ SCHEMA_REGISTRY_URL: local, ...env, MQ_BROKERS: env.MQ_BROKERS ?? '127.0.0.1:9092' });
const registry = config.schemaRegistry;
if (registry === null) throw new Error('consume.ts decodes registry formats: set MQ_VALUE_FORMAT to avro, protobuf or json-schema');
const decode = registryDecoder(registry.format, registry.url);
const idleMs = Number(env.KAFKA_CONSUME_TIMEOUT_MS ?? 5000);
const max = Number(env.KAFKA_CONSUME_MAX ?? Infinity);

const consumer = new Kafka.KafkaConsumer(
  { 'metadata.broker.list': config.brokers, 'group.id': `consume-${process.pid}-${Date.now()}`, 'enable.auto.commit': false, ...config.producerOptions },
  { 'auto.offset.reset': 'earliest' },
);
await new Promise<void>((resolve, reject) => consumer.connect({ timeout: 15_000 }, (err) => (err ? reject(err) : resolve())));
consumer.subscribe([config.topic]);
let printed = 0;
let lastNew = Date.now();
while (printed < max && Date.now() - lastNew < idleMs) {
  const batch = await new Promise<Kafka.Message[]>((resolve, reject) => consumer.consume(500, (err, m) => (err ? reject(err) : resolve(m))));
  if (batch.length > 0) lastNew = Date.now();
  for (const m of batch) {
    if (printed++ >= max) break;
    // A value not in the wire format (written as json before the format changed) is printed as it is.
    const value =
      m.value === null || m.value[0] !== 0
        ? (m.value?.toString() ?? null)
        : await decode(config.topic, m.value).catch((err: Error) => `(not decoded: ${err.message})`);
    process.stdout.write(
      `${m.key?.toString() ?? ''}\tpartition ${m.partition}\t${m.timestamp ?? ''}\t${typeof value === 'string' ? value : JSON.stringify(value)}\n`,
    );
  }
  if (batch.length === 0) await new Promise((r) => setTimeout(r, 100));
}
consumer.disconnect();
process.stderr.write(`consume: ${Math.min(printed, max)} messages of ${config.topic}, ${registry.format} decoded with ${registry.url}\n`);
