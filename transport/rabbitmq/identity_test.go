package rabbitmq_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// TestSyntheticIDStableAcrossRedeliveryAndBrokerDeadLetter: a message
// published by a plain AMQP client without message_id gets a synthetic
// event ID that is the same on its first delivery, on a redelivery (with
// x-delivery-count), and on the broker's own dead letter of it (x-death,
// read from the DLQ); and the ingested entry names its source and delivery
// count like a Lily-made one (issue 12 items 2 and 8).
func TestSyntheticIDStableAcrossRedeliveryAndBrokerDeadLetter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := randomQueue("identity.synthetic", lily.QueueConfig{DeliveryLimit: new(3)})
	tr := openDeclared(t, qc)
	body := []byte(`{"order":1}`)
	headers := map[string]any{"x-app": "billing", "x-decimal": amqp.Decimal{Scale: 1, Value: 5}, "x-nested": amqp.Table{"a": int32(1)}}
	_, ch := rawChannel(t)
	pub := amqp.Publishing{Body: body, Headers: amqp.Table(headers), Timestamp: time.Unix(1700000000, 0), AppId: "billing"}
	if err := ch.PublishWithContext(ctx, "", qc.Name, true, false, pub); err != nil {
		t.Fatal(err)
	}
	// A twin that differs only in one header value's type is another message.
	twin := pub
	twin.Headers = amqp.Table{"x-app": "billing", "x-decimal": amqp.Decimal{Scale: 1, Value: 5}, "x-nested": amqp.Table{"a": int64(1)}}
	if err := ch.PublishWithContext(ctx, "", qc.Name, true, false, twin); err != nil {
		t.Fatal(err)
	}
	var ids []string
	twinID := ""
	get := func(queue string) *amqp.Delivery {
		t.Helper()
		d := getOne(t, ch, queue)
		return &d
	}
	// The broker hands each out delivery_limit times, then dead-letters it.
	for i := 0; i < 2*qc.Settings().DeliveryLimit; i++ {
		d := get(qc.Name)
		id := rabbitmq.EventID(qc.Name, d)
		if _, ok := d.Headers["x-nested"].(amqp.Table)["a"].(int64); ok {
			if twinID != "" && twinID != id {
				t.Errorf("the twin's ID changed on a redelivery: %s then %s", twinID, id)
			}
			twinID = id
		} else {
			ids = append(ids, id)
		}
		if err := d.Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	dl1, dl2 := get(rabbitmq.DeadLetterQueue(qc.Name)), get(rabbitmq.DeadLetterQueue(qc.Name))
	for _, dl := range []*amqp.Delivery{dl1, dl2} {
		if _, ok := dl.Headers["x-death"]; !ok {
			t.Fatalf("DLQ copy without x-death: %v", dl.Headers)
		}
		id := rabbitmq.EventID(rabbitmq.DeadLetterQueue(qc.Name), dl)
		if _, ok := dl.Headers["x-nested"].(amqp.Table)["a"].(int64); !ok {
			ids = append(ids, id)
		} else if id != twinID {
			t.Errorf("the twin's DLQ copy has ID %s, its deliveries %s", id, twinID)
		}
		dl.Nack(false, true)
	}
	if len(ids) != qc.Settings().DeliveryLimit+1 {
		t.Fatalf("%d IDs seen, want %d deliveries and the dead letter", len(ids), qc.Settings().DeliveryLimit+1)
	}
	for _, id := range ids {
		if id != ids[0] || !strings.HasPrefix(id, rabbitmq.SyntheticIDPrefix) {
			t.Fatalf("synthetic IDs over deliveries and the dead letter: %v (want one %s… ID)", ids, rabbitmq.SyntheticIDPrefix)
		}
	}
	if twinID == ids[0] || twinID == "" {
		t.Errorf("a message whose header differs in type got the same ID %s", twinID)
	}
	// Ingest: the broker-made dead letters carry the real delivery count
	// and the runtime's source name, and keep the synthetic IDs.
	cat := tempCatalog(t)
	if n, err := cat.Ingest(ctx, tr, qc.Name); err != nil || n != 2 {
		t.Fatalf("ingest: %d, %v", n, err)
	}
	err := cat.Each(ctx, catalog.Filter{Queue: qc.Name}, func(e *catalog.Entry) error {
		if e.EventID != ids[0] && e.EventID != twinID {
			t.Errorf("entry event ID %s, want the synthetic IDs %s / %s", e.EventID, ids[0], twinID)
		}
		if e.Reason != string(evidence.ReasonDeliveryLimit) || e.DeliveryCount != qc.Settings().DeliveryLimit || e.Source != "rabbitmq/"+qc.Name {
			t.Errorf("broker dead letter: reason %s, delivery count %d, source %q; want delivery_limit, %d, %q",
				e.Reason, e.DeliveryCount, e.Source, qc.Settings().DeliveryLimit, "rabbitmq/"+qc.Name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	groups, err := cat.CountBy(ctx, "source", catalog.Filter{Queue: qc.Name})
	if err != nil || len(groups) != 1 {
		t.Errorf("group by source: %v, %v; want one group", groups, err)
	}
	// Conservation: both messages are in the catalog, nothing left in the
	// queue, its buckets or the DLQ.
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight after ingest: %d, %v", n, err)
	}
	if n, err := tr.DeadLetterDepth(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("DLQ depth after ingest: %d, %v", n, err)
	}
}

// TestTwinsCarryNothingThatTellsThemApart: what the broker gives for two
// different messages a foreign producer published byte-identical (same
// body, headers and properties, no message_id) on a quorum queue. On the
// first delivery and on a redelivery every field of the two deliveries is
// the same except the delivery tag — the channel's sequence number, new on
// every hand-over, so no identity — (and a basic.get's count of messages
// left in the queue), and the redelivery adds the same x-delivery-count to
// both: no stable per-message ID exists, and the
// synthetic event ID is one for both (docs/design.md §7 "identical twins count as
// one"). Through the transport both are marked ContentID, as are Lily's
// give-back copies of them (which carry the ID as message_id), while a
// message published with an ID is not.
func TestTwinsCarryNothingThatTellsThemApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := randomQueue("identity.twins", lily.QueueConfig{DeliveryLimit: new(5)})
	tr := openDeclared(t, qc)
	_, ch := rawChannel(t)
	pub := amqp.Publishing{Body: []byte(`{"charge":10}`), AppId: "billing", ContentType: "application/json",
		Headers: amqp.Table{"x-decimal": amqp.Decimal{Scale: 2, Value: 1000}, "x-nested": amqp.Table{"a": int32(1)}}}
	publishTwins := func() {
		t.Helper()
		for range 2 {
			if err := ch.PublishWithContext(ctx, "", qc.Name, true, false, pub); err != nil {
				t.Fatal(err)
			}
		}
	}
	publishTwins()
	get := func() amqp.Delivery {
		t.Helper()
		return getOne(t, ch, qc.Name)
	}
	var tags []uint64
	for round, redelivered := range []bool{false, true} {
		a, b := get(), get()
		tags = append(tags, a.DeliveryTag, b.DeliveryTag)
		if a.Redelivered != redelivered || b.Redelivered != redelivered {
			t.Fatalf("round %d: redelivered %v and %v, want %v", round, a.Redelivered, b.Redelivered, redelivered)
		}
		ida, idb := rabbitmq.EventID(qc.Name, &a), rabbitmq.EventID(qc.Name, &b)
		if ida != idb || !strings.HasPrefix(ida, rabbitmq.SyntheticIDPrefix) {
			t.Fatalf("round %d: twins' IDs %s and %s, want one synthetic ID", round, ida, idb)
		}
		a.Acknowledger, b.Acknowledger = nil, nil
		a.DeliveryTag, b.DeliveryTag, a.MessageCount, b.MessageCount = 0, 0, 0, 0
		if fmt.Sprintf("%#v", a) != fmt.Sprintf("%#v", b) {
			t.Fatalf("round %d: the twins' deliveries differ beyond the delivery tag:\n%#v\n%#v", round, a, b)
		}
		if redelivered {
			if err := ch.Ack(tags[len(tags)-1], true); err != nil {
				t.Fatal(err)
			}
		} else if err := ch.Nack(tags[len(tags)-1], true, true); err != nil { // both back, counted
			t.Fatal(err)
		}
	}
	if !slices.IsSorted(tags) || tags[0] == tags[2] || tags[1] == tags[3] {
		t.Fatalf("delivery tags %v: want the channel's new sequence numbers on the redelivery", tags)
	}
	// Through the transport: content IDs, kept by Lily's copies.
	publishTwins()
	if err := lily.Publish(ctx, tr, qc.Name, []lily.Message{{Body: []byte(`{"charge":11}`)}}); err != nil {
		t.Fatal(err)
	}
	ds := receiveN(t, tr, transport.ReceiveParams{Queue: qc.Name, Consumer: "probe"}, 3)
	var twins []*transport.Delivery
	for _, d := range ds {
		if d.ContentID != (string(d.Body) == string(pub.Body)) {
			t.Fatalf("delivery %s of %s: ContentID %v", d.EventID, d.Body, d.ContentID)
		}
		if d.ContentID {
			twins = append(twins, d)
		}
	}
	if len(twins) != 2 || twins[0].EventID != twins[1].EventID {
		t.Fatalf("%d twins received, IDs %v", len(twins), twins)
	}
	// A give-back copy of a twin is Lily's (first delivery, the ID as
	// message_id and x-lily-event-id), and still a content ID.
	if err := tr.Unreceive(ctx, &transport.UnreceiveParams{Consumer: "probe", Deliveries: twins[:1]}); err != nil {
		t.Fatal(err)
	}
	cp := receiveN(t, tr, transport.ReceiveParams{Queue: qc.Name, Consumer: "probe"}, 1)[0]
	if !cp.ContentID || cp.EventID != twins[0].EventID || cp.DeliveryCount != 1 || cp.Headers[evidence.HeaderEventID] != cp.EventID {
		t.Fatalf("give-back copy: ContentID %v, ID %s (want %s), count %d, x-lily-event-id %v",
			cp.ContentID, cp.EventID, twins[0].EventID, cp.DeliveryCount, cp.Headers[evidence.HeaderEventID])
	}
	ds = append(ds, cp)
	var ss []transport.Settlement
	for _, d := range ds {
		if d != twins[0] {
			ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
		}
	}
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
		t.Fatal(err)
	}
}
