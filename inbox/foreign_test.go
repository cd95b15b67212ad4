package inbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/effecttest"
	"github.com/lily-mq/lily/internal/rabbittest"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// Traffic published below Lily, as other services' producers publish it:
// a raw amqp091 client with no message_id, header values of types Lily's
// publisher never writes. (Raw franz-go records with no x-lily-event-id:
// transport/kafka/inboxoutbox.)

// foreignPublishing is a payment as a foreign AMQP producer sends it: no
// message_id, an AMQP decimal amount (x-amount, unscaled value amt), a
// nested table, an unsigned byte, an application ID and a content type.
func foreignPublishing(body string, amt int32) amqp.Publishing {
	return amqp.Publishing{Body: []byte(body), DeliveryMode: amqp.Persistent, ContentType: "application/json", AppId: "billing",
		Headers: amqp.Table{
			"x-amount": amqp.Decimal{Scale: 2, Value: amt},
			"x-meta":   amqp.Table{"source": "billing", "region": "eu", "deeper": amqp.Table{"flag": true, "n": int16(3)}},
			"x-tiny":   uint8(200),
		}}
}

// openRabbit connects Lily's RabbitMQ transport to url and declares qc's
// topology, removed when the test ends.
func openRabbit(t *testing.T, url string, qc lily.QueueConfig) *rabbitmq.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: url, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tr.DeleteQueues(ctx, qc.Spec()); err != nil {
			t.Logf("removing %s: %v", qc.Name, err)
		}
		tr.Close()
	})
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestKill9ForeignProducers is TestKill9BetweenCommitAndAck for traffic
// Lily did not publish: payments sent by a raw amqp091 client with no
// message_id (an AMQP decimal amount, a nested table) to a real RabbitMQ.
// (The same for a raw franz-go producer to kfake is in
// transport/kafka/inboxoutbox.) The consumer, counting into a catalog's
// ledger, commits each effect through the inbox keyed by the transport's
// synthetic event ID (syn-…) and is killed with SIGKILL after the commit
// of every third payment, before the ack, and restarted. Every payment's
// effect is applied exactly once (rows and amounts in the application
// database), every redelivery after a kill carries the same synthetic ID
// as the delivery that applied it and is found applied, and the ledger
// balances: accepted = acked, nothing lost.
func TestKill9ForeignProducers(t *testing.T) {
	bodies, wantAmount := effecttest.ForeignPayments(45)
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		url := rabbittest.URL(t)
		qc := effecttest.QueueConfig(lily.TransportRabbitMQ, effecttest.RandomQueue("inbox.crash.foreign"))
		tr := openRabbit(t, url, qc)
		pubs := make([]amqp.Publishing, len(bodies))
		for i, b := range bodies {
			pubs[i] = foreignPublishing(string(b), int32(100+i))
		}
		rabbittest.Publish(context.Background(), t, url, qc.Name, pubs...)
		effecttest.RunForeignKills(t, qc, tr, url, bodies, wantAmount, func(id string) bool { return strings.HasPrefix(id, rabbitmq.SyntheticIDPrefix) })
	})
}
