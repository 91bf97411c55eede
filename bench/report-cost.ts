// `make bench-report-cost`: what a delivery report per message would cost, the reason ACK_MODE=async
// asks librdkafka for failure reports only (see the delivery latency metrics in the README).
// Produces REPORT_COST_MESSAGES (1,000,000) messages of 110 bytes with the service's producer settings,
// once with `delivery.report.only.error=true` and once with a report per message (each observed in
// a latency histogram), and prints this process's CPU time per message for both, alternating twice.
import Kafka from 'node-rdkafka';
import { BROKERS, createTopic, deleteTopic, uniqueTopic } from '../test/helpers/kafka.js';

const MESSAGES = Number(process.env.REPORT_COST_MESSAGES ?? 1_000_000);
const CHUNK = 20_000; // produced per timer tick, so that reports are served in between

type Mode = 'failures only' | 'every message';

async function run(topic: string, mode: Mode): Promise<void> {
  const common = {
    'metadata.broker.list': BROKERS,
    'linger.ms': 10,
    'batch.num.messages': 100,
    'enable.idempotence': true,
    acks: 'all',
    partitioner: 'murmur2_random',
    'queue.buffering.max.messages': MESSAGES,
    'queue.buffering.max.kbytes': 2_000_000,
  };
  const producer = new Kafka.Producer(
    mode === 'failures only'
      ? { ...common, dr_msg_cb: true, 'delivery.report.only.error': true }
      : { ...common, dr_cb: true, 'delivery.report.only.error': false },
  );
  const bounds = [0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
  const histogram = new Array<number>(bounds.length + 1).fill(0);
  let reports = 0;
  producer.on('delivery-report', (_err, report) => {
    reports++;
    const s = (Date.now() - (report.timestamp ?? 0)) / 1000;
    let i = 0;
    while (i < bounds.length && s > bounds[i]!) i++;
    histogram[i]!++;
  });
  producer.setPollInterval(10);
  await new Promise<void>((resolve, reject) => producer.connect({}, (err) => (err ? reject(err) : resolve())));

  const value = Buffer.alloc(110, 'x');
  const cpu = process.cpuUsage();
  const started = Date.now();
  let sent = 0;
  while (sent < MESSAGES) {
    const now = Date.now();
    for (const end = Math.min(MESSAGES, sent + CHUNK); sent < end; sent++) producer.produce(topic, null, value, `c${sent % 5000}`, now);
    await new Promise((r) => setTimeout(r, 20));
  }
  await new Promise<void>((resolve, reject) => producer.flush(60_000, (err) => (err ? reject(err) : resolve())));
  while (mode === 'every message' && reports < MESSAGES) await new Promise((r) => setTimeout(r, 10));
  const used = process.cpuUsage(cpu);
  const perMessage = (used.user + used.system) / MESSAGES;
  console.log(
    `${mode.padEnd(13)}: ${MESSAGES} messages in ${Date.now() - started} ms, ${perMessage.toFixed(2)} µs CPU per message, ${reports} reports`,
  );
  await new Promise<void>((resolve) => producer.disconnect(() => resolve()));
}

const topic = await createTopic(uniqueTopic('report-cost'));
try {
  for (const mode of ['failures only', 'every message', 'failures only', 'every message'] as const) await run(topic, mode);
} finally {
  await deleteTopic(topic);
}
