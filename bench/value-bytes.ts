// `make bench-value-bytes`: the bytes of a point's Kafka message in each MQ_VALUE_FORMAT against json,
// value and key, for the bench's points (bench/lib/points.ts: 6-decimal coordinates, as devices send
// them, and computed ones at full precision). A smaller message is cheaper in the broker's disk, its
// replication and every consumer's network. Encoded by the service's own decoder (track-body.ts),
// with a schema id as the registry gives one; no broker, no registry.
import { decodeTrackBody } from '../src/http/track-body.js';
import { registryFraming, type RegistryFraming } from '../src/track-point/registry-encode.js';
import type { RegistryFormat } from '../src/track-point/registry-schemas.js';
import { benchPoints, type Coordinates } from './lib/points.js';

const POINTS = 10_000;
const formats: (RegistryFormat | 'json')[] = ['json', 'avro', 'protobuf', 'json-schema'];
const limits = { maxBodyBytes: 64 * 1024 * 1024, maxPoints: POINTS };

console.log(`${POINTS} points of 64 containers (ids like "bench-c12"), one request; bytes per point`);
console.log('| coordinates | format | value | key | message (value + key) | against json |');
console.log('|---|---|---|---|---|---|');
for (const coordinates of ['distinct', 'computed'] as Coordinates[]) {
  const body = Buffer.from(JSON.stringify(benchPoints(POINTS, 'bench', coordinates)));
  let json = 0;
  for (const format of formats) {
    const framing: RegistryFraming | null = format === 'json' ? null : registryFraming(format, 1);
    const decoded = decodeTrackBody(body, false, limits, framing);
    if ('refused' in decoded) throw new Error(`the bench's body was refused: ${decoded.message}`);
    let values = 0;
    let keys = 0;
    for (let i = 0; i < decoded.count; i++) {
      values += decoded.messages[4 * i + 1]! - decoded.messages[4 * i]!;
      keys += decoded.messages[4 * i + 3]! - decoded.messages[4 * i + 2]!;
    }
    const perPoint = (values + keys) / decoded.count;
    if (format === 'json') json = perPoint;
    const fixed = (n: number) => n.toFixed(1);
    console.log(
      `| ${coordinates} | ${format} | ${fixed(values / decoded.count)} | ${fixed(keys / decoded.count)} | ${fixed(perPoint)} | ${(perPoint / json).toFixed(2)}× |`,
    );
  }
}
