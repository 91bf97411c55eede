// The Java client's default partitioner for keyed messages (org.apache.kafka.common.utils.Utils.murmur2
// and toPositive), written out so a test can check that this service's messages land where a Java
// producer of the same key would put them.
export function murmur2(data: Buffer): number {
  const seed = 0x9747b28c;
  const m = 0x5bd1e995;
  const r = 24;
  const length = data.length;
  let h = (seed ^ length) | 0;
  const length4 = length >> 2;
  for (let i = 0; i < length4; i++) {
    const i4 = i * 4;
    let k = (data[i4]! & 0xff) + ((data[i4 + 1]! & 0xff) << 8) + ((data[i4 + 2]! & 0xff) << 16) + ((data[i4 + 3]! & 0xff) << 24);
    k = Math.imul(k, m);
    k ^= k >>> r;
    k = Math.imul(k, m);
    h = Math.imul(h, m);
    h ^= k;
  }
  const rest = length & 3;
  const base = length & ~3;
  if (rest === 3) h ^= (data[base + 2]! & 0xff) << 16;
  if (rest >= 2) h ^= (data[base + 1]! & 0xff) << 8;
  if (rest >= 1) {
    h ^= data[base]! & 0xff;
    h = Math.imul(h, m);
  }
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h;
}

export function javaPartition(key: string, partitions: number): number {
  return (murmur2(Buffer.from(key, 'utf8')) & 0x7fffffff) % partitions;
}
