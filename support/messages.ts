// What an encoded request hands Kafka, read back as keys and values, for the tests and the benchmarks
// that check messages (src/track-point/encode.ts says how a request is laid out).
import type { EncodedPoints } from '../src/track-point/encode.js';

/** The messages of an encoded request as keys and values (copies): what Kafka receives, for checks. */
export function messagesOf(batch: Pick<EncodedPoints, 'count' | 'data' | 'messages'>): { keys: string[]; values: Buffer[] } {
  const keys: string[] = [];
  const values: Buffer[] = [];
  const data = Buffer.from(batch.data.buffer, batch.data.byteOffset, batch.data.byteLength);
  for (let i = 0; i < batch.count; i++) {
    const m = batch.messages.subarray(4 * i, 4 * i + 4);
    values.push(Buffer.from(data.subarray(m[0], m[1])));
    keys.push(data.toString('utf8', m[2], m[3]));
  }
  return { keys, values };
}
