// Registry-format values decoded by Confluent's own deserializers (@confluentinc/schemaregistry), a
// reader nobody here wrote: for `make consume` and the tests. In scripts/, not support/: the image's
// build compiles scripts/ alone.
import { AvroDeserializer, JsonDeserializer, ProtobufDeserializer, SchemaRegistryClient, SerdeType, type Client } from '@confluentinc/schemaregistry';

export type RegistryFormat = 'avro' | 'protobuf' | 'json-schema';

/**
 * Confluent's client, with one fix for Apicurio's Confluent API: asked for a Protobuf schema in the
 * `serialized` format, Apicurio answers the FileDescriptorProto's bytes as characters where Confluent
 * answers them in base64 (what the deserializer decodes).
 */
function registryClient(url: string): Client {
  const client = new SchemaRegistryClient({ baseURLs: [url] });
  const byId = client.getBySubjectAndId.bind(client);
  client.getBySubjectAndId = async (subject, id, format) => {
    const info = await byId(subject, id, format);
    return format === 'serialized' ? { ...info, schema: Buffer.from(info.schema, 'latin1').toString('base64') } : info;
  };
  return client;
}

/** A decoder of one format's values: each value as the object its deserializer gives. */
export function registryDecoder(format: RegistryFormat, url: string): (topic: string, value: Buffer) => Promise<Record<string, unknown>> {
  const client = registryClient(url);
  const deserializer =
    format === 'avro'
      ? new AvroDeserializer(client, SerdeType.VALUE, {})
      : format === 'protobuf'
        ? new ProtobufDeserializer(client, SerdeType.VALUE, {})
        : new JsonDeserializer(client, SerdeType.VALUE, {});
  return async (topic, value) => {
    const decoded = (await deserializer.deserialize(topic, value)) as Record<string, unknown>;
    if (format !== 'protobuf') return decoded;
    // protobuf-es names fields in lowerCamelCase and adds the type's name: the schema's names back.
    const { $typeName, containerId, ...rest } = decoded;
    void $typeName;
    return { container_id: containerId, ...rest };
  };
}
