// BASELINE FOR THE BENCHMARKS, NOT THE SERVICE.
// The same contract written the way most TypeScript teams would: node:http, JSON.parse, a zod schema,
// kafkajs, one process. Same topic, same keys and values, acks=all, idempotent. It exists so that
// `make bench` can report our/baseline ratios measured side by side in the same run.
import { createServer } from 'node:http';
import { Kafka, Partitioners, logLevel } from 'kafkajs';
import { z } from 'zod';

const brokers = (process.env.MQ_BROKERS ?? 'localhost:9092').split(',');
const topic = process.env.MQ_TOPIC ?? 'container.telemetry';
const port = Number((process.env.LISTEN_ADDR ?? ':8080').split(':').pop());

const Point = z.object({
  container_id: z.string().min(1).max(64),
  lat: z.number().min(-90).max(90),
  lon: z.number().min(-180).max(180),
  timestamp: z.string().datetime({ offset: true }),
  speed: z.number().min(0).default(0),
});
const Points = z.array(Point).max(10_000);

const kafka = new Kafka({ clientId: 'baseline', brokers, logLevel: logLevel.ERROR });
// kafkajs's default partitioner is murmur2 like the Java client's (createPartitioner silences its warning).
const producer = kafka.producer({ idempotent: true, createPartitioner: Partitioners.DefaultPartitioner });
await producer.connect();

const server = createServer((req, res) => {
  if (req.url !== '/track') {
    res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not_found"}');
    return;
  }
  if (req.method !== 'POST') {
    res.writeHead(405, { 'content-type': 'application/json', allow: 'POST' }).end('{"error":"method_not_allowed"}');
    return;
  }
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    let body: unknown;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":"invalid_json"}');
      return;
    }
    const parsed = Points.safeParse(body);
    if (!parsed.success) {
      res.writeHead(400, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'validation_failed', details: parsed.error.issues }));
      return;
    }
    const points = parsed.data;
    // Respond at once, write in the background (the spec's asynchronous write).
    producer
      .send({
        topic,
        acks: -1,
        messages: points.map((p) => ({ key: p.container_id, value: JSON.stringify(p) })),
      })
      .catch((err: Error) => console.error('kafka send failed', err.message));
    res.writeHead(202, { 'content-type': 'application/json' }).end(JSON.stringify({ accepted: points.length }));
  });
});
server.keepAliveTimeout = 10_000;
server.listen(port, '127.0.0.1', () => console.log(JSON.stringify({ msg: 'baseline listening', port })));

const stop = async () => {
  server.close();
  await producer.disconnect();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
