// SIGTERM: stop accepting, finish what is in flight, flush every producer, exit 0, lose nothing.
import { describe, expect, it } from 'vitest';
import { consumeAll } from '../../support/kafka.js';
import { point, postTrack, startService } from '../helpers/service.js';
import { fileTopic } from '../helpers/topic.js';

const topic = fileTopic('shutdown');
describe('graceful shutdown', () => {
  it('delivers every accepted point when SIGTERM arrives right after the last 202', async () => {
    // linger.ms=1000 keeps the points in the producers' queues when the signal arrives, so the
    // test shows the flush at work rather than points that happened to be sent already.
    const svc = await startService({ MQ_TOPIC: topic, WORKERS: '2', MQ_OPT_LINGER_MS: '1000' });
    const requests = 20;
    const perRequest = 50;
    const results = await Promise.all(
      Array.from({ length: requests }, (_, r) =>
        postTrack(
          svc.url,
          Array.from({ length: perRequest }, (_, i) => point(`sd-${r % 7}`, { speed: r * perRequest + i })),
        ),
      ),
    );
    expect(results.map((r) => r.status)).toEqual(Array(requests).fill(202));
    const code = await svc.stop('SIGTERM');
    expect(code).toBe(0);
    expect(svc.output.filter((l) => l.includes('every accepted point was acknowledged by Kafka'))).toHaveLength(2);

    const messages = await consumeAll(topic, { expected: requests * perRequest });
    const seqs = messages.map((m) => JSON.parse(m.value).speed as number).sort((a, b) => a - b);
    expect(seqs).toEqual(Array.from({ length: requests * perRequest }, (_, i) => i));
  });
});
