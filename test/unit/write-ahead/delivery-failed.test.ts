// ACK_MODE=delivered: what a request whose points Kafka did not all acknowledge is told, and whether a
// resend is safe (write-ahead/delivered.ts, deliveryFailed).
import { describe, expect, it } from 'vitest';
import { newTicket } from '../../../src/kafka/delivery-reports.js';
import { deliveryFailed } from '../../../src/write-ahead/delivered.js';

describe('the answer to a request whose points were not all acknowledged', () => {
  const ticket = (failed: number, uncertain: number) => ({ ...newTicket(() => undefined), failed, uncertain, firstError: 'Local: Message timed out' });

  it('is delivery_failed only when librdkafka says that none of them was written', () => {
    expect(deliveryFailed(ticket(4, 0), 4)).toEqual({
      code: 'delivery_failed',
      message: 'none of the 4 track points was written to Kafka (Local: Message timed out); resend the whole request',
    });
  });

  it('is delivery_uncertain when some were written, or may have been', () => {
    const partly = deliveryFailed(ticket(1, 0), 4);
    const maybe = deliveryFailed(ticket(4, 2), 4);
    expect([partly.code, maybe.code]).toEqual(['delivery_uncertain', 'delivery_uncertain']);
    expect(partly.message).toBe(
      '1 of 4 track points were not acknowledged by Kafka (Local: Message timed out); 3 were written: resending the whole request may duplicate them',
    );
    expect(maybe.message).toMatch(/4 of 4 .*; 0 were written and 2 may have been \(sent, no answer in time\)/);
  });
});
