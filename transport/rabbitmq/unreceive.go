package rabbitmq

import (
	"context"
	"errors"
	"fmt"

	"github.com/lily-mq/lily/transport"
)

var _ transport.Unreceiver = (*Transport)(nil)

// errRedelivered refuses to give back a redelivery: a new copy would start
// its count again and so escape delivery_limit.
var errRedelivered = errors.New("a redelivery is not given back: its copy would lose the broker's delivery count")

// Unreceive gives first deliveries that no handler saw back to their
// queue without raising their delivery count, so that a graceful stop
// neither waits for the whole prefetch window nor hands the successor a
// window of "redelivered" messages (which would run one at a time).
//
// AMQP cannot return a message uncounted — a nack with requeue, or closing
// the channel, counts as a delivery on a quorum queue — so the delivery is
// republished as it came (body, headers with their types, properties,
// event ID as message_id) to its queue through the default exchange,
// mandatory and confirmed, and only then is the original acknowledged, the
// same order as every hand-off (DESIGN §4). The copy is at the tail of the
// queue: a consumer of an ordered queue does not give back (see
// transport.Features.UnreceiveInPlace). A redelivery (count above 1) is
// refused for that delivery: its count must stay. The result is reported
// as for Settle; a delivery whose copy failed is still held.
func (t *Transport) Unreceive(ctx context.Context, p *transport.UnreceiveParams) error {
	n := len(p.Deliveries)
	if n == 0 {
		return nil
	}
	errs := make([]error, n)
	rcs := make([]receipt, n)
	ss := make([]transport.Settlement, n)
	var copies []outMsg
	var copyOf []int
	for i, d := range p.Deliveries {
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
		if d.DeliveryCount > 1 || rc.raw.Redelivered {
			errs[i] = fmt.Errorf("rabbitmq: give back %s (delivery %d): %w", d.EventID, d.DeliveryCount, errRedelivered)
			continue
		}
		pub, err := publishing(d.Message, rc.raw)
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
			errs[i] = fmt.Errorf("rabbitmq: give back %s to %s: %w", p.Deliveries[i].EventID, p.Deliveries[i].Queue, err)
		}
	}
	settleOriginals(ss, rcs, errs)
	for _, err := range errs {
		if err != nil {
			return &transport.SettleError{Errs: errs}
		}
	}
	return nil
}
