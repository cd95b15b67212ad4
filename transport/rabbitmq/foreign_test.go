package rabbitmq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/rabbittest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// rawPublish publishes msgs to queue with a plain amqp091 client (no
// Lily): message_id only when the message has an ID, its headers as given,
// publisher confirms awaited.
func rawPublish(ctx context.Context, t *testing.T, _ transport.Transport, queue string, msgs []transporttest.ForeignMessage) {
	t.Helper()
	pubs := make([]amqp.Publishing, len(msgs))
	for i, m := range msgs {
		pubs[i] = amqp.Publishing{Body: m.Body, MessageId: m.ID, DeliveryMode: amqp.Persistent}
		if len(m.Headers) > 0 {
			pubs[i].Headers = amqp.Table(m.Headers)
		}
	}
	rabbittest.Publish(ctx, t, brokerURL(), queue, pubs...)
}

// foreignHarness runs the foreign-producer scenarios on the broker, with
// the ledger and catalog in a SQLite file (ledger.Account).
func foreignHarness() transporttest.ForeignHarness {
	return transporttest.ForeignHarness{
		Name:       "rabbitmq",
		Open:       openAccounted,
		PublishRaw: rawPublish,
		Ingest: func(ctx context.Context, tr transport.Transport, cat *catalog.Store, queue string) error {
			_, err := cat.Ingest(ctx, tr.(*ledger.Accounted), queue)
			return err
		},
		ForeignHeaders: map[string]any{
			"x-foreign-decimal": amqp.Decimal{Scale: 2, Value: 1234},
			"x-foreign-uint8":   uint8(200),
			"x-foreign-uint16":  uint16(60000),
			"x-foreign-uint32":  uint32(4000000000),
			"x-foreign-int8":    int8(-5),
			"x-foreign-float":   float64(1.5),
			"x-foreign-bytes":   []byte{0, 1, 2, 0xff},
			"x-foreign-table":   amqp.Table{"inner": "v", "n": int32(7), "deeper": amqp.Table{"x": true}},
			"x-foreign-time":    time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		},
		SameHeader: sameAMQPValue,
		// frame_max is 128 KiB by default (131072): one header of 130,000
		// bytes fits as sent; Lily's evidence must not push the copy past it.
		HugeHeader:  130000,
		ForgedCount: map[string]any{"x-delivery-count": int64(99)},
		Teardown: func(ctx context.Context, tr transport.Transport, spec transport.QueueSpec) error {
			return tr.(*ledger.Accounted).Unwrap().(*rabbitmq.Transport).DeleteQueues(ctx, spec)
		},
	}
}

// sameAMQPValue compares a header value sent with amqp091 and read back
// through Lily (a delivery's headers, or a catalog entry's after its
// round trip through the catalog's encoding): same type and value, tables
// compared field by field, an AMQP decimal as Lily's transport.Decimal.
func sameAMQPValue(sent, got any) bool {
	switch s := sent.(type) {
	case amqp.Table:
		var g map[string]any
		switch x := got.(type) {
		case amqp.Table:
			g = x
		case map[string]any:
			g = x
		default:
			return false
		}
		if len(g) != len(s) {
			return false
		}
		for k, v := range s {
			if !sameAMQPValue(v, g[k]) {
				return false
			}
		}
		return true
	case time.Time:
		g, ok := got.(time.Time)
		return ok && g.Equal(s)
	case amqp.Decimal:
		// Lily's header model holds an AMQP decimal as transport.Decimal,
		// written back to the wire as amqp.Decimal (TestHeaderTypesTravelAsSent).
		g, ok := got.(transport.Decimal)
		return ok && g.Scale == s.Scale && g.Value == s.Value
	}
	return fmt.Sprintf("%T %v", sent, sent) == fmt.Sprintf("%T %v", got, got)
}

// TestForeignProducers runs the foreign-producer harness on RabbitMQ.
func TestForeignProducers(t *testing.T) {
	transporttest.RunForeign(t, foreignHarness())
}
