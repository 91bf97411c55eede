// What the binding's produceBatch (patches/kafka-javascript-produce-batch.patch) takes and how it says
// it took only part of a call: shared by the producer (producer.ts) and its transactions
// (transactional-producer.ts).

/** A request's messages as produceBatch takes them: the shape of a journal record (journal/record.ts). */
export interface ProducedBatch {
  readonly count: number;
  readonly data: Uint8Array;
  /** Four offsets into `data` per message: value start and end, key start and end. */
  readonly messages: Uint32Array;
}

/** How many messages produceBatch queued before it threw (its error says; 0 for any other error). */
export function enqueuedBefore(err: unknown): number {
  const enqueued = typeof err === 'object' && err !== null && 'enqueued' in err ? err.enqueued : 0;
  return typeof enqueued === 'number' ? enqueued : 0;
}
