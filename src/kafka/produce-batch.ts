// What the binding's produceBatch (patches/kafka-javascript-produce-batch.patch) takes and how it says
// it took only part of a call: shared by the producer (producer.ts) and its transactions
// (transactional-producer.ts). The patch's methods and report fields are typed here, not in the
// binding's own types: a new version of the binding then has one file less to port.

declare module '@confluentinc/kafka-javascript/types/rdkafka.js' {
  interface Producer {
    /** Enqueued count; throws an Error with `code` and `enqueued` when librdkafka refused a message. */
    produceBatch(topic: string, data: Uint8Array, messages: Uint32Array, opaque?: unknown, timestamp?: number): number;
    /** (tag, count) pairs of the tagged acknowledgements since the last call, or undefined. */
    takeAcks(): Uint32Array | undefined;
    /** rd_kafka_outq_len(): messages queued or in flight, and reports not yet served. */
    queueLength(): number;
  }
  interface DeliveryReport {
    /** librdkafka's message status: 0 not persisted, 1 possibly persisted, 2 persisted. */
    status?: number;
    /** produceBatch's numeric tag, when the message had one (only failures are reported then). */
    tag?: number;
  }
}

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
