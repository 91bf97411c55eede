// Which Kafka client a worker runs: logged at start and exported as ingest_build_info, so that an SRE
// sees which librdkafka, and so which of its fixes, every pod carries.
import { createRequire } from 'node:module';
import Kafka from '@confluentinc/kafka-javascript';

export const KAFKA_CLIENT = '@confluentinc/kafka-javascript';

export interface KafkaClientBuild {
  /** The npm package and its version. */
  readonly client: string;
  readonly clientVersion: string;
  /** The librdkafka compiled into it (rd_kafka_version_str). */
  readonly librdkafka: string;
}

export function kafkaClientBuild(): KafkaClientBuild {
  const { version } = createRequire(import.meta.url)(`${KAFKA_CLIENT}/package.json`) as { version: string };
  return { client: KAFKA_CLIENT, clientVersion: version, librdkafka: Kafka.librdkafkaVersion };
}
