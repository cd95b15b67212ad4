package sqs

import (
	"context"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// giveBack takes the redeliveries received beside one that is about to
// run alone off this consumer, and returns the deliveries it did not give
// back (first deliveries, and redeliveries it could not give back): the
// caller keeps those, leased, for its next receives. Competing consumers
// make this necessary: when one dies, SQS hands what it had received out
// again after the visibility timeout, receive counts raised, and a
// consumer still receiving ten at a time gets several of those
// redeliveries in one batch. Kept leased while one of them runs alone,
// they die with it if it is the poison, counted once more each time, until
// they reach delivery_limit beside it (seen with three consumer
// processes: three innocent messages dead-lettered with the poison).
//
// Making one visible again would not help (SQS counts the next receive),
// so each redelivery is sent again to its queue as a copy carrying its
// receives so far in evidence.HeaderPriorDeliveries (less this receive,
// which no handler saw: the copy's count goes on from there, neither
// raised nor reset), and the original is deleted once the copy is sent.
// The copy keeps the event ID (a foreign message's ID is its SQS message
// ID, carried in Lily's pack), body and attributes. A FIFO queue keeps its
// order: nothing is given back there (SQS returns one group's messages in
// order, and a copy would go to the end of its group).
func (t *Transport) giveBack(ctx context.Context, queue, url string, ds []*transport.Delivery) (kept []*transport.Delivery) {
	if IsFIFO(queue) {
		return ds
	}
	var back []*transport.Delivery
	for _, d := range ds {
		if d.DeliveryCount > 1 {
			back = append(back, d)
		} else {
			kept = append(kept, d)
		}
	}
	sent := make([]bool, len(back))
	errs := t.parallelEach(len(back), func(i int) error {
		d := back[i]
		rc := d.Receipt.(*receipt)
		h := transport.CloneHeaders(d.Headers)
		h[evidence.HeaderPriorDeliveries] = evidence.CarriedDeliveries(d.DeliveryCount)
		w, err := encode(d.EventID, d.Key, d.Type, d.Body, h, rc.types)
		if err != nil {
			return err
		}
		if err := t.send(ctx, url, queue, w, "", d.Key, 0); err != nil {
			return err
		}
		sent[i] = true
		// Sent: the copy is the message now, and the delete must happen
		// even if the consumer is stopping (ctx cancelled). An original
		// whose delete fails comes back as well (a duplicate with the same
		// event ID).
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return t.settle(dctx, &transport.Settlement{Delivery: d, Action: transport.Ack}, false)
	})
	for i, err := range errs {
		switch {
		case err == nil:
		case sent[i]:
			// Not handed out: if its lease was kept it comes back after
			// the visibility timeout (or at once with RecoverLeases).
			t.opts.Logger.Warn("sqs: a given-back redelivery's original could not be deleted; it may come back beside its copy (same event ID)",
				"queue", queue, "event_id", back[i].EventID, "err", err)
		default:
			t.opts.Logger.Warn("sqs: could not give back a redelivery received beside one that runs alone; it stays received and runs alone later",
				"queue", queue, "event_id", back[i].EventID, "err", err)
			kept = append(kept, back[i])
		}
	}
	return kept
}
