package rabbitmq

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/transport"
)

// TestPriorDeliveriesCount: a give-back copy's carried count adds to the
// broker's (on its first delivery and on a redelivery of the copy); a
// value that is not an integer in 1..100 is ignored; and no copy but the
// give-back carries it (publishing leaves it out: a retry, dead-letter or
// redrive copy starts its count afresh, as docs/design.md §5 says).
func TestPriorDeliveriesCount(t *testing.T) {
	for _, c := range []struct {
		name        string
		prior       any
		redelivered bool
		brokerCount any
		want        int
	}{
		{"no header", nil, false, nil, 1},
		{"copy, first delivery", int32(2), false, nil, 3},
		{"copy, redelivered", int32(2), true, int64(1), 4},
		{"copy, long-long", int64(4), false, nil, 5},
		{"copy, short", int16(1), false, nil, 2},
		{"zero", int32(0), false, nil, 1},
		{"negative", int32(-3), false, nil, 1},
		{"over 100", int32(101), false, nil, 1},
		{"string", "3", false, nil, 1},
		{"float", 3.0, false, nil, 1},
	} {
		h := amqp.Table{}
		if c.prior != nil {
			h[headerPriorDeliveries] = c.prior
		}
		if c.brokerCount != nil {
			h[headerDeliveryCount] = c.brokerCount
		}
		d := &amqp.Delivery{Headers: h, Redelivered: c.redelivered}
		if got := deliveryCount(d); got != c.want {
			t.Errorf("%s: delivery count %d, want %d", c.name, got, c.want)
		}
	}
	p, err := publishing(transport.Message{EventID: "e", Headers: transport.Headers{headerPriorDeliveries: int32(2), "app": "v"}},
		&amqp.Delivery{Redelivered: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Headers[headerPriorDeliveries]; ok || p.Headers["app"] != "v" {
		t.Errorf("a copy's headers %v: want the carried count left out and the message's own headers kept", p.Headers)
	}
}
