package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/transport/rabbitmq"
)

// The shapes of the foreign dead letters below, as each framework
// publishes them on RabbitMQ:
//
//   - MassTransit (src/MassTransit.Abstractions/MessageHeaders.cs and
//     SetExceptionHeaders): MT-Reason "fault", MT-Fault-ExceptionType,
//     MT-Fault-InputAddress (the receive endpoint's address,
//     rabbitmq://host/[vhost/]queue), MT-Fault-Message,
//     MT-Fault-Timestamp (DateTime "O": round-trip text),
//     MT-Fault-StackTrace, MT-Fault-ConsumerType, MT-Fault-MessageType as
//     strings, MT-Fault-RetryCount an int (AMQP int32), MT-Host-* strings;
//     the AMQP message_id is the message's GUID, content_type
//     application/vnd.masstransit+json, persistent. A message no consumer
//     took goes to <queue>_skipped with MT-Reason "dead-letter" and no
//     fault headers.
//   - RabbitMQ dead-lettering (rabbitmq.com/docs/dlx): made by the broker
//     itself here — a reject with requeue=false on a queue whose
//     x-dead-letter-exchange is "" — so x-death (a list of tables: queue,
//     reason, count, time, exchange, routing-keys) and x-first-death-*
//     are exactly the broker's.
//   - NServiceBus (docs.particular.net nservicebus/messaging/headers,
//     RabbitMqTransportMessageExtensions): every header a string;
//     NServiceBus.FailedQ is the input queue, NServiceBus.TimeOfFailure in
//     the wire format "yyyy-MM-dd HH:mm:ss:ffffff Z",
//     NServiceBus.ExceptionInfo.*; message_id and correlation_id are AMQP
//     properties, persistent.

// foreignBroker is a raw AMQP channel for the foreign producers.
type foreignBroker struct {
	t    *testing.T
	conn *amqp.Connection
	ch   *amqp.Channel
}

func newForeignBroker(t *testing.T, url string) *foreignBroker {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &foreignBroker{t: t, conn: conn, ch: ch}
}

// declare declares a durable classic queue, deleted at the end.
func (b *foreignBroker) declare(name string, args amqp.Table) {
	b.t.Helper()
	if _, err := b.ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() {
		ch, err := b.conn.Channel()
		if err == nil {
			ch.QueueDelete(name, false, false, false)
			ch.Close()
		}
	})
}

// publish sends p to queue through the default exchange and waits for the
// confirm.
func (b *foreignBroker) publish(queue string, p amqp.Publishing) {
	b.t.Helper()
	dc, err := b.ch.PublishWithDeferredConfirmWithContext(context.Background(), "", queue, true, false, p)
	if err != nil {
		b.t.Fatal(err)
	}
	if ok, err := dc.WaitContext(context.Background()); err != nil || !ok {
		b.t.Fatalf("publish to %s not confirmed: %v", queue, err)
	}
}

// getAll takes every message of queue (acking them).
func (b *foreignBroker) getAll(queue string) []amqp.Delivery {
	b.t.Helper()
	var out []amqp.Delivery
	for {
		d, ok, err := b.ch.Get(queue, true)
		if err != nil {
			b.t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

func mtFault(id, inputAddress, msg string, retries int32) amqp.Publishing {
	body := fmt.Sprintf(`{"messageId":%q,"destinationAddress":%q,"messageType":["urn:message:Shop.Contracts:SubmitOrder"],"message":{"orderId":"%s-order"},"sentTime":"2026-12-01T13:59:58.1234567Z"}`, id, inputAddress, id)
	return amqp.Publishing{
		MessageId: id, ContentType: "application/vnd.masstransit+json", DeliveryMode: amqp.Persistent, Body: []byte(body),
		Headers: amqp.Table{
			"MT-Reason":                  "fault",
			"MT-Fault-ExceptionType":     "System.InvalidOperationException",
			"MT-Fault-InputAddress":      inputAddress,
			"MT-Fault-Message":           msg,
			"MT-Fault-Timestamp":         "2026-12-01T14:00:00.1234567Z",
			"MT-Fault-StackTrace":        "   at Shop.SubmitOrderConsumer.Consume(ConsumeContext`1 context) in /src/Shop/SubmitOrderConsumer.cs:line 42",
			"MT-Fault-ConsumerType":      "Shop.SubmitOrderConsumer",
			"MT-Fault-MessageType":       "Shop.Contracts.SubmitOrder",
			"MT-Fault-RetryCount":        retries,
			"MT-Host-MachineName":        "shop-7f9c",
			"MT-Host-ProcessName":        "Shop.Worker",
			"MT-Host-ProcessId":          "1",
			"MT-Host-MassTransitVersion": "8.2.1.0",
		},
	}
}

// TestForeignDLQsRabbitMQ drains a MassTransit _error and _skipped queue,
// a queue fed by a dead-letter exchange and an NServiceBus error queue,
// keeps their evidence, redrives each message to its origin (one with
// --to), discards one with a record, and reconciles every foreign queue:
// ingested = redriven + discarded, nothing left the DLQs without a record.
func TestForeignDLQsRabbitMQ(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			testForeignDLQs(t, store)
		})
	}
}

func testForeignDLQs(t *testing.T, store string) {
	url := needRabbit(t)
	b := newForeignBroker(t, url)
	p := fmt.Sprintf("f%08x", rand.Uint32())
	orders, ordersErr, ordersSkipped, parking := p+".orders", p+".orders_error", p+".orders_skipped", p+".parking"
	billing, billingDead := p+".billing", p+".billing.dead"
	sales, nsbError := p+".sales", p+".error"
	for _, q := range []string{orders, ordersErr, ordersSkipped, parking, billingDead, sales, nsbError} {
		b.declare(q, nil)
	}
	b.declare(billing, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": billingDead})

	// MassTransit: three faults (the input address with a vhost and
	// options, as MassTransit writes it) and a skipped message.
	addr := "rabbitmq://rabbit.internal:5672/shop/" + orders + "?temporary=false"
	b.publish(ordersErr, mtFault("0b5e0000-0001-0000-0000-000000000001", addr, "Payment declined for order 1", 3))
	b.publish(ordersErr, mtFault("0b5e0000-0001-0000-0000-000000000002", addr, "Payment declined for order 2", 3))
	b.publish(ordersErr, mtFault("0b5e0000-0001-0000-0000-000000000003", addr, "Order 3 has no lines", 0))
	b.publish(ordersSkipped, amqp.Publishing{MessageId: "0b5e0000-0001-0000-0000-000000000004", ContentType: "application/vnd.masstransit+json",
		DeliveryMode: amqp.Persistent, Body: []byte(`{"message":{"orderId":"4"}}`),
		Headers: amqp.Table{"MT-Reason": "dead-letter", "MT-Host-MachineName": "shop-7f9c"}})
	// x-death: a foreign producer (no message_id), the broker dead-letters
	// it on a reject.
	b.publish(billing, amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: []byte(`{"invoice":17}`),
		Headers: amqp.Table{"tenant": "acme", "attempt": int16(2)}})
	if d, ok, err := b.ch.Get(billing, false); err != nil || !ok {
		t.Fatalf("get from %s: %v %v", billing, ok, err)
	} else if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	// NServiceBus.
	b.publish(nsbError, amqp.Publishing{MessageId: "5e1e0000-0000-0000-0000-000000000005", CorrelationId: "5e1e0000-0000-0000-0000-000000000005",
		DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: []byte(`{"OrderId":5}`),
		Headers: amqp.Table{
			"NServiceBus.MessageId":                   "5e1e0000-0000-0000-0000-000000000005",
			"NServiceBus.EnclosedMessageTypes":        "Sales.Messages.PlaceOrder, Sales.Messages, Version=1.0.0.0",
			"NServiceBus.ContentType":                 "application/json",
			"NServiceBus.FailedQ":                     sales,
			"NServiceBus.ProcessingEndpoint":          "Sales",
			"NServiceBus.ProcessingMachine":           "sales-01",
			"NServiceBus.TimeOfFailure":               "2026-12-01 14:00:00:123456 Z",
			"NServiceBus.ExceptionInfo.ExceptionType": "System.TimeoutException",
			"NServiceBus.ExceptionInfo.Message":       "The inventory service did not answer in 30s",
			"NServiceBus.ExceptionInfo.StackTrace":    "System.TimeoutException: The inventory service did not answer in 30s\n   at Sales.PlaceOrderHandler.Handle",
			"NServiceBus.ExceptionInfo.Source":        "Sales",
		}})

	db := filepath.Join(t.TempDir(), "catalog.db")
	catalogLine, where := "", db
	if store == "postgres" {
		where = pgtest.URL(t)
		catalogLine = fmt.Sprintf("catalog_url = %q\n", where)
	}
	cfg := writeConfig(t, catalogLine+fmt.Sprintf(`db = %q
rabbitmq_url = %q
[[foreign_dlq]]
queue = %q
kind = "masstransit"
[[foreign_dlq]]
queue = %q
kind = "masstransit"
[[foreign_dlq]]
queue = %q
kind = "x-death"
[[foreign_dlq]]
queue = %q
kind = "nservicebus"
`, db, url, ordersErr, ordersSkipped, billingDead, nsbError))
	code, out, errOut := run(t, "dlq", "ingest", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("ingest exit %d\n%s\n%s", code, out, errOut)
	}
	var ing ingestJSON
	if err := json.Unmarshal([]byte(out), &ing); err != nil || ing.Total != 6 ||
		ing.Queues[ordersErr] != 3 || ing.Queues[ordersSkipped] != 1 || ing.Queues[billingDead] != 1 || ing.Queues[nsbError] != 1 {
		t.Fatalf("ingest: %v %s", err, out)
	}
	for _, q := range []string{ordersErr, ordersSkipped, billingDead, nsbError} {
		if left := b.getAll(q); len(left) != 0 {
			t.Fatalf("%s still holds %d messages after ingest", q, len(left))
		}
	}
	// The foreign evidence is kept and read.
	ctx := context.Background()
	open := catalog.Open
	if store == "postgres" {
		open = catalog.OpenPostgres
	}
	cat, err := open(ctx, where)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	byQueue := map[string][]*catalog.Entry{}
	entries, err := cat.List(ctx, catalog.Filter{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		byQueue[e.Queue] = append(byQueue[e.Queue], e)
	}
	mt := byQueue[ordersErr]
	if len(mt) != 3 || mt[0].ErrorType != "System.InvalidOperationException" || !strings.Contains(mt[0].ErrorMessage, "Payment declined") ||
		mt[0].EventID != "0b5e0000-0001-0000-0000-000000000001" || mt[0].Headers["MT-Fault-RetryCount"] != int32(3) {
		t.Errorf("MassTransit entries: %+v", mt)
	}
	if sk := byQueue[ordersSkipped]; len(sk) != 1 || sk[0].Reason != "skipped" {
		t.Errorf("skipped entry: %+v, want reason skipped", sk)
	}
	if xd := byQueue[billingDead]; len(xd) != 1 || xd[0].Reason != "rejected" || xd[0].Headers["x-first-death-queue"] != billing ||
		xd[0].Headers["attempt"] != int16(2) {
		t.Errorf("x-death entry: %+v", xd)
	}
	if ns := byQueue[nsbError]; len(ns) != 1 || ns[0].ErrorType != "System.TimeoutException" || !strings.Contains(ns[0].ErrorMessage, "did not answer") ||
		!ns[0].DeadLetteredAt.Equal(time.Date(2026, 12, 1, 14, 0, 0, 123000000, time.UTC)) {
		t.Errorf("NServiceBus entry: %+v", *ns[0])
	}

	// One MassTransit fault is discarded, one redriven to a parking queue
	// with --to, the rest to their origins.
	ids := func(es []*catalog.Entry) string { return es[0].EventID }
	if code, out, errOut := run(t, "dlq", "discard", "--config", cfg, "--event-ids", mt[2].EventID, "--reason", "order 3 cancelled by the customer"); code != 0 {
		t.Fatalf("discard exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := run(t, "dlq", "redrive", "--config", cfg, "--event-ids", mt[1].EventID, "--to", parking, "--json"); code != 0 {
		t.Fatalf("redrive --to exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := run(t, "dlq", "redrive", "--config", cfg, "--json"); code != 0 {
		t.Fatalf("redrive exit %d\n%s\n%s", code, out, errOut)
	}
	check := func(queue, wantID string, wantHeader string, wantProps func(amqp.Delivery) bool) {
		t.Helper()
		got := b.getAll(queue)
		if queue == orders && len(got) == 2 && got[1].MessageId == "0b5e0000-0001-0000-0000-000000000004" {
			// The skipped message's origin: its queue name without _skipped.
			if got[1].ContentType != "application/vnd.masstransit+json" || got[1].Headers["MT-Reason"] != "dead-letter" {
				t.Errorf("the skipped message on redrive: %+v", got[1])
			}
			got = got[:1]
		}
		if len(got) != 1 {
			t.Errorf("%s holds %d messages, want 1 (%s)", queue, len(got), wantID)
			return
		}
		d := got[0]
		if wantID != "" && d.MessageId != wantID {
			t.Errorf("%s: message_id %q, want %q", queue, d.MessageId, wantID)
		}
		if _, ok := d.Headers[wantHeader]; !ok {
			t.Errorf("%s: header %s lost on redrive: %v", queue, wantHeader, d.Headers)
		}
		if _, ok := d.Headers[rabbitmq.HeaderAMQPProperties]; ok {
			t.Errorf("%s: Lily's %s was sent", queue, rabbitmq.HeaderAMQPProperties)
		}
		if d.Headers["x-lily-redrive-count"] != int32(1) {
			t.Errorf("%s: x-lily-redrive-count %v, want 1", queue, d.Headers["x-lily-redrive-count"])
		}
		if !wantProps(d) {
			t.Errorf("%s: properties not restored: content_type %q correlation_id %q", queue, d.ContentType, d.CorrelationId)
		}
	}
	mtProps := func(d amqp.Delivery) bool { return d.ContentType == "application/vnd.masstransit+json" }
	check(orders, ids(mt), "MT-Fault-Message", mtProps)
	check(parking, mt[1].EventID, "MT-Fault-Message", mtProps)
	check(billing, byQueue[billingDead][0].EventID, "x-death", func(d amqp.Delivery) bool { return d.ContentType == "application/json" })
	check(sales, "5e1e0000-0000-0000-0000-000000000005", "NServiceBus.FailedQ", func(d amqp.Delivery) bool {
		return d.ContentType == "application/json" && d.CorrelationId == "5e1e0000-0000-0000-0000-000000000005"
	})

	// Reconcile: every foreign queue balances.
	code, out, errOut = run(t, "reconcile", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("reconcile exit %d\n%s\n%s", code, out, errOut)
	}
	var rec reconcileJSON
	if err := json.Unmarshal([]byte(out), &rec); err != nil || !rec.Balanced {
		t.Fatalf("reconcile: %v %s", err, out)
	}
	want := map[string][3]int64{ordersErr: {3, 2, 1}, ordersSkipped: {1, 1, 0}, billingDead: {1, 1, 0}, nsbError: {1, 1, 0}}
	for _, r := range rec.Queues {
		w, ok := want[r.Queue]
		if !ok {
			continue
		}
		delete(want, r.Queue)
		if r.Accepted != w[0] || r.Acked != w[1] || r.Discarded != w[2] || r.DeadLettered != 0 || r.Lost != 0 {
			t.Errorf("ledger of %s: %+v, want accepted %d = %d redriven + %d discarded", r.Queue, r, w[0], w[1], w[2])
		}
	}
	if len(want) != 0 {
		t.Errorf("reconcile shows no row for %v: %s", want, out)
	}
}
