// A fresh topic for one test file: created before its tests and deleted after them (after the file's
// own afterAll hooks, which vitest runs in reverse order, so services stop before their topic goes).
// Kept apart from kafka.ts, which the benchmarks import without vitest.
import { afterAll, beforeAll } from 'vitest';
import { createTopic, deleteTopic, uniqueTopic } from '../../support/kafka.js';

/** Call at the top of a test file, before its own hooks; returns the topic's name. */
export function fileTopic(name: string, partitions = 6): string {
  const topic = uniqueTopic(name);
  beforeAll(async () => {
    await createTopic(topic, partitions);
  });
  afterAll(() => deleteTopic(topic));
  return topic;
}
