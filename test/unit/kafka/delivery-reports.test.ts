// librdkafka's delivery reports: a failure of ACK_MODE=async goes to be produced again (its record's
// tag and its message), one of ACK_MODE=delivered counts against its request's ticket.
import Kafka from '@confluentinc/kafka-javascript';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/log.js';
import { DeliveryReports, MSG_STATUS, newTicket, type DeliveryTicket } from '../../../src/kafka/delivery-reports.js';
import type { FailedMessage } from '../../../src/kafka/delivery-reports.js';
import { createWorkerMetrics } from '../../../src/metrics/metrics.js';
import { metricValue } from '../../helpers/service.js';

const timedOut = Object.assign(new Error('Local: Message timed out'), {
  code: Kafka.CODES.ERRORS.ERR__MSG_TIMED_OUT,
  errno: Kafka.CODES.ERRORS.ERR__MSG_TIMED_OUT,
  origin: 'local',
}) as Kafka.LibrdKafkaError;
const report = (over: Partial<Kafka.DeliveryReport>): Kafka.DeliveryReport => ({ topic: 't', partition: 0, offset: 0, size: 1, ...over });

function setup() {
  const metrics = createWorkerMetrics('w');
  const failed: FailedMessage[] = [];
  const reports = new DeliveryReports(metrics, createLogger('silent', {}), (m) => failed.push(m));
  return { metrics, failed, reports };
}

describe('DeliveryReports', () => {
  it('hands a failed message of a journal record on to be produced again, saying whether Kafka may have it, and counts it', async () => {
    const { metrics, failed, reports } = setup();
    reports.onReport(timedOut, report({ tag: 7, key: Buffer.from('k'), value: Buffer.from('v'), status: MSG_STATUS.POSSIBLY_PERSISTED }));
    reports.onReport(timedOut, report({ tag: 8, key: 'k2', value: Buffer.from('v2'), status: MSG_STATUS.NOT_PERSISTED }));
    expect(failed.map((m) => [m.id, m.key.toString(), m.value.toString(), m.possiblyWritten])).toEqual([
      [7, 'k', 'v', true],
      [8, 'k2', 'v2', false],
    ]);
    expect(metricValue(await metrics.registry.metrics(), 'ingest_delivery_errors_total{code="ERR__MSG_TIMED_OUT"}')).toBe(2);
  });

  it('settles a ticket once its last point reported: failed points counted, the possibly written ones apart', () => {
    const { reports, failed } = setup();
    const settled: DeliveryTicket[] = [];
    const ticket = newTicket((t) => settled.push(t));
    ticket.remaining = 3;
    reports.onReport(null, report({ opaque: ticket, status: MSG_STATUS.PERSISTED }));
    reports.onReport(timedOut, report({ opaque: ticket, status: MSG_STATUS.POSSIBLY_PERSISTED }));
    expect(settled).toEqual([]);
    reports.onReport(timedOut, report({ opaque: ticket, status: MSG_STATUS.NOT_PERSISTED }));
    expect(settled.map((t) => [t.failed, t.uncertain, t.firstError])).toEqual([[2, 1, 'Local: Message timed out']]);
    expect(failed).toEqual([]); // the client hears 500: nothing is produced again behind its back
  });

  it('does not settle a ticket twice (the deadline answered it first)', () => {
    const { reports } = setup();
    let settles = 0;
    const ticket = newTicket(() => settles++);
    ticket.remaining = 1;
    ticket.settled = true;
    reports.onReport(null, report({ opaque: ticket }));
    expect(settles).toBe(0);
  });
});
