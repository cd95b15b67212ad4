package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/lily-mq/lily"
)

// DefaultQueue is the poison demo's queue unless --queue names another.
const DefaultQueue = "orders.created"

// The SKUs of two trouble makers, which handlers of the workload written
// elsewhere (the sidecar tests' HTTP handler) recognize too: a gift card's
// note crashes the renderer, and the inventory service never knows a
// retired SKU.
const (
	CrashSKU    = "GIFT-CARD-NATIVE"
	HopelessSKU = "SKU-RETIRED-2019"
)

// The demo's shop: an order consumer with four kinds of trouble.
const (
	classOK    = "ok"
	classMalf  = "malformed" // body does not decode: permanent
	classFlaky = "flaky"     // payment gateway times out 1-2 times, then succeeds
	classHope  = "hopeless"  // inventory service never knows the SKU: retries exhausted
	classCrash = "crashing"  // gift note crashes the renderer: the worker process dies
)

// Order is the body of an order.created message.
type Order struct {
	OrderID     string `json:"order_id"`
	Customer    string `json:"customer"`
	SKU         string `json:"sku"`
	Quantity    int    `json:"quantity"`
	AmountCents int    `json:"amount_cents"`
	Currency    string `json:"currency"`
	// GatewayTimeouts is how many times the (simulated) payment gateway
	// times out for this order before it answers.
	GatewayTimeouts int    `json:"gateway_timeouts,omitempty"`
	GiftNote        string `json:"gift_note,omitempty"`
}

// Workload builds n order messages, of which the given numbers are
// malformed, flaky, hopeless and crashing, shuffled by seed. It returns the
// messages and each one's class by position.
func Workload(n, malformed, flaky, hopeless, crashing int, seed uint64) ([]lily.Message, []string) {
	classes := make([]string, n)
	i := 0
	for _, c := range []struct {
		name  string
		count int
	}{{classMalf, malformed}, {classFlaky, flaky}, {classHope, hopeless}, {classCrash, crashing}} {
		for range c.count {
			classes[i] = c.name
			i++
		}
	}
	for ; i < n; i++ {
		classes[i] = classOK
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	r.Shuffle(n, func(a, b int) { classes[a], classes[b] = classes[b], classes[a] })
	msgs := make([]lily.Message, n)
	for i, c := range classes {
		o := Order{
			OrderID:     fmt.Sprintf("o-%06d", i+1),
			Customer:    fmt.Sprintf("c-%04d", r.IntN(5000)),
			SKU:         fmt.Sprintf("SKU-%04d", r.IntN(900)+100),
			Quantity:    r.IntN(4) + 1,
			AmountCents: r.IntN(50000) + 199,
			Currency:    "EUR",
		}
		switch c {
		case classFlaky:
			o.GatewayTimeouts = 1 + r.IntN(2)
		case classHope:
			o.SKU = HopelessSKU
		case classCrash:
			o.SKU = CrashSKU
			o.GiftNote = strings.Repeat("🎁", 64)
		}
		body, _ := json.Marshal(o)
		if c == classMalf {
			body = body[:len(body)/2] // truncated in transit: not JSON
		}
		msgs[i] = lily.Message{
			Key:     o.Customer,
			Type:    "order.created",
			Body:    body,
			Headers: lily.Headers{"x-lily-schema-version": "1", "source-system": "shop-web"},
		}
	}
	return msgs, classes
}

// errGatewayTimeout is the payment gateway's transient failure.
var errGatewayTimeout = errors.New("payment gateway: timeout after 2s")

// inventoryError is the inventory service's answer for an unknown SKU: a
// 503 that looks transient but never recovers.
type inventoryError struct {
	SKU string
}

func (e *inventoryError) Error() string {
	return fmt.Sprintf("inventory service: 503 Service Unavailable for sku %q", e.SKU)
}

// handler is the shop's order consumer. A gift card order crashes the
// process (a native renderer fault, not a Go error): the runtime cannot
// catch it, only the delivery count can.
func handler(ctx context.Context, d *lily.Delivery) error {
	var o Order
	if err := json.Unmarshal(d.Body, &o); err != nil {
		return lily.Permanent(fmt.Errorf("decode order: %w", err))
	}
	if o.SKU == CrashSKU {
		p, _ := os.FindProcess(os.Getpid())
		_ = p.Kill() // SIGKILL: no defer runs, like a segfault in native code
		select {}
	}
	if d.RetryCount < o.GatewayTimeouts {
		return fmt.Errorf("charge order %s: %w", o.OrderID, errGatewayTimeout)
	}
	if o.SKU == HopelessSKU {
		return fmt.Errorf("reserve stock for order %s: %w", o.OrderID, &inventoryError{SKU: o.SKU})
	}
	return nil
}
