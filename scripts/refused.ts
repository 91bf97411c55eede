// `make refused`: the last requests the service refused for their content, read from MQ_REFUSED_TOPIC
// (src/refused/refused-requests.ts writes them) and printed as a table, newest last: when, the error
// code, the first container_id of the body, what was wrong, and the sizes. The bodies themselves:
// `make consume MQ_TOPIC=<the refused topic>`, or any Kafka consumer (the headers hold the rest).
//
//   REFUSED_LAST   20   how many rows
// MQ_BROKERS, MQ_REFUSED_TOPIC and the connection's MQ_OPT_* (security, SASL, TLS) are read as the
// service reads them (src/config.ts).
import Kafka from '@confluentinc/kafka-javascript';
import { ConfigError, loadConfig, type Config } from '../src/config.js';

const say = (text: string) => process.stderr.write(`refused: ${text}\n`);
const stop = (text: string): never => {
  say(text);
  process.exit(2);
};

let config: Readonly<Config>;
try {
  config = loadConfig();
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  stop(`configuration error: ${err.message}`);
}
if (config!.refused === null)
  stop(
    'MQ_REFUSED_TOPIC is not set: the service keeps no refused requests (set it, e.g. MQ_REFUSED_TOPIC=container.telemetry.refused, for make run and make refused alike)',
  );
const topic = config!.refused!.topic;
const last = Number(process.env.REFUSED_LAST ?? 20);
if (!(Number.isInteger(last) && last > 0)) stop(`REFUSED_LAST must be a whole number above 0, got ${process.env.REFUSED_LAST}`);

/** The connection's own properties of MQ_OPT_* (a consumer refuses the producer's). */
const connection = Object.fromEntries(Object.entries(config!.producerOptions).filter(([name]) => /^(security|sasl|ssl)\./.test(name)));
const consumer = new Kafka.KafkaConsumer(
  { 'metadata.broker.list': config!.brokers, 'group.id': 'track-ingest-refused-table', 'enable.auto.commit': false, ...connection },
  {},
);
/** The binding's callback form as a promise; its errors are LibrdKafkaError (a message and a code). */
const call = <T>(f: (cb: (err: { message: string } | null | undefined, value: T) => void) => void): Promise<T> =>
  new Promise((resolve, reject) => f((err, value) => (err ? reject(new Error(err.message)) : resolve(value))));

interface Row {
  at: string;
  code: string;
  container: string;
  what: string;
  size: string;
  timestamp: number;
}

async function main(): Promise<void> {
  await call<unknown>((cb) => consumer.connect({ timeout: 10_000 }, cb));
  try {
    const metadata = await call<Kafka.Metadata>((cb) => consumer.getMetadata({ topic, timeout: 10_000 }, cb));
    const partitions = metadata.topics.find((t) => t.name === topic)?.partitions.map((p) => p.id) ?? [];
    if (partitions.length === 0)
      stop(`topic ${topic} does not exist on ${config.brokers} (make run creates it on the local broker; elsewhere create it as you do MQ_TOPIC)`);
    // The last `last` messages of each partition: the newest `last` of the topic are among them.
    const ranges = await Promise.all(
      partitions.map(async (partition) => {
        const w = await call<Kafka.WatermarkOffsets>((cb) => consumer.queryWatermarkOffsets(topic, partition, 10_000, cb));
        return { partition, from: Math.max(w.lowOffset, w.highOffset - last), to: w.highOffset };
      }),
    );
    const wanted = ranges.filter((r) => r.to > r.from);
    const rows: Row[] = [];
    if (wanted.length > 0) {
      consumer.assign(wanted.map((r) => ({ topic, partition: r.partition, offset: r.from })));
      const left = new Map(wanted.map((r) => [r.partition, r.to]));
      const deadline = Date.now() + 15_000;
      while (left.size > 0 && Date.now() < deadline) {
        const messages = await call<Kafka.Message[]>((cb) => consumer.consume(500, cb));
        for (const m of messages) {
          rows.push(row(m));
          if (m.offset + 1 >= (left.get(m.partition) ?? Infinity)) left.delete(m.partition);
        }
      }
    }
    print(rows.sort((a, b) => a.timestamp - b.timestamp).slice(-last));
  } finally {
    await new Promise<void>((resolve) => consumer.disconnect(() => resolve()));
  }
}

function row(m: Kafka.Message): Row {
  const h = Object.fromEntries((m.headers ?? []).flatMap((header) => Object.entries(header).map(([k, v]) => [k, v.toString()])));
  const sent = h['body.sent_bytes'];
  const inflated = h['body.bytes'];
  return {
    at: h['refused.at'] ?? new Date(m.timestamp ?? 0).toISOString(),
    code: `${h['refused.status'] ?? '?'} ${h['refused.code'] ?? '?'}`,
    container: m.key === null || m.key === undefined ? '-' : m.key.toString(),
    what: what(h['refused.message'] ?? '', h['refused.details']),
    size: sent === undefined ? '-' : inflated === undefined ? `${sent} B` : `${sent} B (${inflated} B inflated)`,
    timestamp: m.timestamp ?? 0,
  };
}

/** The message, and the first issues of `details`: "point 0 lat: must be at most 90". */
function what(message: string, details: string | undefined): string {
  if (details === undefined) return message;
  try {
    const issues = JSON.parse(details) as { index: number; field?: string; message: string }[];
    const shown = issues.slice(0, 2).map((i) => `point ${i.index}${i.field === undefined ? '' : ` ${i.field}`}: ${i.message}`);
    return `${message}: ${shown.join('; ')}${issues.length > 2 ? `; ${issues.length - 2} more` : ''}`;
  } catch {
    return message;
  }
}

function print(rows: Row[]): void {
  if (rows.length === 0) return void console.log(`no refused requests on ${topic}`);
  const columns = [
    ['TIME', 'at'],
    ['CODE', 'code'],
    ['FIRST CONTAINER', 'container'],
    ['SIZE', 'size'],
    ['DETAILS', 'what'],
  ] as const;
  const width = (key: keyof Row, title: string) => Math.min(48, Math.max(title.length, ...rows.map((r) => String(r[key]).length)));
  const widths = columns.map(([title, key]) => (key === 'what' ? 0 : width(key, title)));
  const line = (cells: string[]) => cells.map((c, i) => (widths[i] === 0 ? c : c.slice(0, widths[i]).padEnd(widths[i]!))).join('  ');
  console.log(line(columns.map(([title]) => title)));
  for (const r of rows) console.log(line(columns.map(([, key]) => String(r[key]))));
  console.log(`${rows.length} of the last refused requests on ${topic}`);
}

main().catch((err: unknown) => stop(`cannot read ${topic} on ${config.brokers}: ${err instanceof Error ? err.message : String(err)}`));
