// The size of a spill journal record beyond its key and value, and what a full producer queue takes in
// the journal: the journal writes records of this layout (kafka/spill-journal.ts), the configuration checks
// that SPILL_MAX_BYTES can hold a full queue (config.ts), the producer keeps that room (kafka/producer.ts).
//
//   crc32 (4) | key length (4) | value length (4) | timestamp ms (8) = 20 bytes, then key, value

/** Bytes a spill journal record takes beyond its key and value. */
export const SPILL_RECORD_OVERHEAD_BYTES = 20;

/** Journal bytes that a completely full producer queue would need if all of it failed. */
export function spillReserveBytes(config: { queueMaxBytes: number; queueMaxPoints: number }): number {
  return config.queueMaxBytes + SPILL_RECORD_OVERHEAD_BYTES * config.queueMaxPoints;
}
