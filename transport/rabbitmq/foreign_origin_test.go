package rabbitmq

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/transport"
)

func TestForeignOrigin(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kind, dlq string
		h         transport.Headers
		want, err string
	}{
		{ForeignMassTransit, "orders_error", transport.Headers{"MT-Fault-InputAddress": "rabbitmq://localhost/orders"}, "orders", ""},
		{ForeignMassTransit, "x_error", transport.Headers{"MT-Fault-InputAddress": []byte("rabbitmq://rabbit:5672/shop/submit-order?temporary=false&durable=true")}, "submit-order", ""},
		{ForeignMassTransit, "x_error", transport.Headers{"MT-Fault-InputAddress": "rabbitmqs://h/v%2Fhost/q%20one"}, "q one", ""},
		{ForeignMassTransit, "orders_skipped", transport.Headers{"MT-Reason": "dead-letter"}, "orders", ""},
		{ForeignMassTransit, "orders.dead", nil, "", "pass --to QUEUE"},
		{ForeignMassTransit, "x_error", transport.Headers{"MT-Fault-InputAddress": "loopback://localhost/q"}, "", `scheme "loopback"`},
		{ForeignMassTransit, "x_error", transport.Headers{"MT-Fault-InputAddress": "rabbitmq://localhost/"}, "", "no queue in the path"},
		{ForeignXDeath, "d", transport.Headers{"x-first-death-queue": "billing"}, "billing", ""},
		{ForeignXDeath, "d", transport.Headers{"x-death": []any{
			amqp.Table{"queue": "billing.retry", "reason": "expired", "count": int64(1), "time": time.Now()},
			transport.Headers{"queue": "billing", "reason": "rejected", "count": int64(1)},
		}}, "billing", ""},
		{ForeignXDeath, "d", transport.Headers{}, "", "no x-first-death-queue"},
		{ForeignNServiceBus, "error", transport.Headers{"NServiceBus.FailedQ": "Sales"}, "Sales", ""},
		{ForeignNServiceBus, "error", transport.Headers{"NServiceBus.FailedQ": "Sales@MACHINE-01"}, "Sales", ""},
		{ForeignNServiceBus, "error", transport.Headers{}, "", "no NServiceBus.FailedQ"},
		{"rebus", "error", nil, "", "want masstransit, x-death or nservicebus"},
	} {
		got, err := ForeignOrigin(c.kind, c.dlq, c.h)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s %s %v: %q, %v; want an error saying %q", c.kind, c.dlq, c.h, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s %s %v: %q, %v; want %q", c.kind, c.dlq, c.h, got, err, c.want)
		}
	}
}
