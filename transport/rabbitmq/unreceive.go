package rabbitmq

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

var _ transport.Unreceiver = (*Transport)(nil)

// Unreceive gives deliveries that no handler saw back to their queue
// without raising their delivery count, so that a graceful stop neither
// waits for the whole prefetch window nor hands the successor a window of
// "redelivered" messages (which would run one at a time).
//
// AMQP cannot return a message uncounted — a nack with requeue, or closing
// the channel, counts as a delivery on a quorum queue — so the delivery is
// republished as it came (body, headers with their types, properties,
// event ID as message_id) to its queue through the default exchange,
// mandatory and confirmed, and only then is the original acknowledged, the
// same order as every hand-off (docs/design.md §4). A redelivery's copy carries
// its count so far in headerPriorDeliveries (giveBack), so its count goes
// on from there: neither raised nor reset. The copy is at the tail of the
// queue: a consumer of an ordered queue does not give back (see
// transport.Features.UnreceiveInPlace). The result is reported as for
// Settle; a delivery whose copy failed is still held.
func (t *Transport) Unreceive(ctx context.Context, p *transport.UnreceiveParams) error {
	errs := t.giveBack(ctx, p.Deliveries)
	for _, err := range errs {
		if err != nil {
			return &transport.SettleError{Errs: errs}
		}
	}
	return nil
}

// giveBack republishes each delivery of ds, held and handed to no handler,
// to its queue as it came (mandatory, confirmed) and then acknowledges the
// original, reporting per delivery. A redelivery's count so far (less this
// hand-out, which no handler saw) is carried in headerPriorDeliveries, so
// that the copy's count goes on from there.
func (t *Transport) giveBack(ctx context.Context, ds []*transport.Delivery) []error {
	n := len(ds)
	errs := make([]error, n)
	if n == 0 {
		return errs
	}
	rcs := make([]receipt, n)
	ss := make([]transport.Settlement, n)
	var copies []outMsg
	var copyOf []int
	for i, d := range ds {
		ss[i] = transport.Settlement{Delivery: d, Action: transport.Ack}
		rc, ok := d.Receipt.(receipt)
		if !ok {
			errs[i] = fmt.Errorf("rabbitmq: give back %s: delivery was not received from this transport", d.EventID)
			continue
		}
		rcs[i] = rc
		if err := rc.held(); err != nil {
			errs[i] = err
			continue
		}
		pub, err := giveBackPublishing(d, rc.raw)
		if err != nil {
			errs[i] = err
			continue
		}
		copies = append(copies, outMsg{exchange: "", key: d.Queue, pub: pub})
		copyOf = append(copyOf, i)
	}
	for j, err := range t.publish(ctx, copies) {
		if err != nil {
			i := copyOf[j]
			errs[i] = fmt.Errorf("rabbitmq: give back %s to %s: %w", ds[i].EventID, ds[i].Queue, err)
		}
	}
	settleOriginals(ss, rcs, errs)
	return errs
}

// giveBackPublishing is the copy that gives d (raw as received) back: the
// message as it came, and for a redelivery its count so far less this
// hand-out in headerPriorDeliveries.
func giveBackPublishing(d *transport.Delivery, raw *amqp.Delivery) (amqp.Publishing, error) {
	pub, err := publishing(d.Message, raw)
	if err != nil {
		return pub, err
	}
	redelivery := d.DeliveryCount > 1 || raw.Redelivered
	if prior := evidence.CarriedDeliveries(deliveryCount(raw)); redelivery && prior > 0 {
		pub.Headers[headerPriorDeliveries] = prior
	}
	return pub, nil
}
