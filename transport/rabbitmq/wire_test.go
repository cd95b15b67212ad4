package rabbitmq_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// This file covers messages published below Lily (a raw amqp091 producer,
// as other services publish): their header types and sizes, and headers
// such a producer may set that belong to the broker (issue 12).

// outcomes records what the runtime reported per event ID.
type outcomes struct {
	mu           sync.Mutex
	acked, dead  map[string]int
	settleFailed int
}

func newOutcomes() *outcomes { return &outcomes{acked: map[string]int{}, dead: map[string]int{}} }

func (o *outcomes) hook() lily.Hook {
	return lily.HookFunc(func(_ context.Context, e lily.Event) {
		o.mu.Lock()
		defer o.mu.Unlock()
		switch e.Kind {
		case lily.EventAcked:
			o.acked[e.EventID]++
		case lily.EventDeadLettered:
			o.dead[e.EventID]++
		case lily.EventSettleFailed:
			o.settleFailed++
		}
	})
}

func (o *outcomes) count(m map[string]int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(m)
}

// conserveForeign is the conservation check for messages published below
// Lily (so not counted as accepted by lily.Publish): every one of ids ends
// in exactly one place — acknowledged by the consumer (acked), an entry
// of the catalog, a dead letter still in the broker's DLQ, or still ready
// in the queue (ready, for a redriven copy not consumed) — nothing else
// appeared, and nothing is held in flight. When the catalog's ledger counts
// the queue's messages as accepted, it must balance too.
func conserveForeign(t *testing.T, tr *rabbitmq.Transport, cat *catalog.Store, queue string, ids []string, acked map[string]int) {
	t.Helper()
	ctx := context.Background()
	where := map[string][]string{}
	for id, n := range acked {
		for range n {
			where[id] = append(where[id], "acked")
		}
	}
	dls, err := tr.Peek(ctx, &rabbitmq.PeekParams{Queue: rabbitmq.DeadLetterQueue(queue)})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dls {
		where[d.EventID] = append(where[d.EventID], "dlq")
	}
	if cat != nil {
		es, err := cat.List(ctx, catalog.Filter{Queue: queue}, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.State != catalog.StateRedriven {
				where[e.EventID] = append(where[e.EventID], "catalog "+string(e.State))
			}
		}
	}
	ready, err := tr.Peek(ctx, &rabbitmq.PeekParams{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ready {
		where[d.EventID] = append(where[d.EventID], "ready")
	}
	// A failure logs the explanation: the ledger, the broker's counts
	// and the IDs that differ, so that a CI log tells the whole story.
	c := transporttest.Conservation{Queue: queue, Published: ids, Ended: where}
	failed := false
	defer func() {
		if failed {
			c.Broker = transporttest.BrokerCounts(ctx, tr, queue)
			t.Log(c.Explain())
		}
	}()
	known := map[string]bool{}
	for _, id := range ids {
		known[id] = true
		if len(where[id]) != 1 {
			failed = true
			t.Errorf("conservation: message %s ended in %v, want exactly one place", id, where[id])
		}
	}
	for id, w := range where {
		if !known[id] {
			failed = true
			t.Errorf("conservation: %s (%v) was never published (invented)", id, w)
		}
	}
	if n, err := tr.InFlight(ctx, queue); err != nil || n != int64(len(ready)) {
		failed = true
		t.Errorf("conservation: %d in flight in %s (%v), want the %d ready", n, queue, err, len(ready))
	}
	if cat == nil {
		return
	}
	rows, err := ledger.New(cat).Rows(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Queue == queue {
			c.Row = &r
		}
		if r.Queue == queue && r.Accepted > 0 && !r.Balanced() {
			failed = true
			t.Errorf("conservation: ledger %+v does not balance", r)
		}
	}
}

// TestForgedDeliveryCountIsNotTrusted: a message published with its own
// x-delivery-count (a shovel, a service that republishes what it consumed)
// reaches the handler on its first delivery with count 1 — it is not
// dead-lettered at the delivery limit — and the header travels on as the
// message's own.
func TestForgedDeliveryCountIsNotTrusted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := randomQueue("wire.forged", lily.QueueConfig{})
	tr := openDeclared(t, qc)
	_, ch := rawChannel(t)
	ids := []string{"forged-99", "forged-4", "plain"}
	counts := []any{int64(99), int32(4), nil}
	for i, id := range ids {
		h := amqp.Table{}
		if counts[i] != nil {
			h["x-delivery-count"] = counts[i]
		}
		if err := ch.PublishWithContext(ctx, "", qc.Name, true, false, amqp.Publishing{MessageId: id, Headers: h, Body: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}
	out := newOutcomes()
	var mu sync.Mutex
	seen := map[string]int{}
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		seen[d.EventID] = d.DeliveryCount
		return nil
	}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 20 * time.Millisecond, Hooks: []lily.Hook{out.hook()}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	transporttest.RunUntil(t, c, 30*time.Second, func() bool { return out.count(out.acked)+out.count(out.dead) == len(ids) })
	for _, id := range ids {
		if n, ok := seen[id]; !ok || n != 1 {
			t.Errorf("%s: handler saw delivery count %d (called %t), want 1 on a first delivery", id, n, ok)
		}
	}
	if n := out.count(out.dead); n != 0 {
		t.Errorf("%d messages dead-lettered, want none: a publisher's x-delivery-count is not the broker's", n)
	}
	conserveForeign(t, tr, nil, qc.Name, ids, out.acked)
}

// foreignHeaders are headers of every type amqp091 writes and reads back
// (checked against RabbitMQ 3.10: each comes back with its type), nested
// tables and arrays included. Timestamps are left out: amqp091 reads them
// in the local zone, so they compare by instant, not by DeepEqual (the
// typed catalog encoding of time.Time is covered in package transport).
func foreignHeaders() amqp.Table {
	return amqp.Table{
		"price":   amqp.Decimal{Scale: 2, Value: 1234},
		"neg":     amqp.Decimal{Scale: 3, Value: -5},
		"u8":      uint8(200),
		"u16":     uint16(math.MaxUint16),
		"u32":     uint32(math.MaxUint32),
		"i8":      int8(-7),
		"i16":     int16(-300),
		"i32":     int32(-70000),
		"i64":     int64(math.MinInt64),
		"f32":     float32(1.5),
		"f64":     2.25,
		"flag":    true,
		"nothing": nil,
		"bin":     []byte{0, 1, 0xfe, 0xff},
		"text":    "12.34",
		"table": amqp.Table{
			"d":     amqp.Decimal{Scale: 1, Value: 7},
			"u8":    uint8(1),
			"inner": amqp.Table{"u16": uint16(2), "bin": []byte("x")},
		},
		"array": []any{uint8(3), amqp.Decimal{Value: 9}, uint32(4), amqp.Table{"u32": uint32(5)}, []any{int8(-1)}},
	}
}

// sameTypes compares header values exactly: equal values of the same Go
// types, nested tables and arrays element by element.
func sameTypes(t *testing.T, where string, got, want amqp.Table) {
	t.Helper()
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: header %q missing", where, k)
			continue
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s: header %q = %T %#v, want %T %#v", where, k, g, g, w, w)
		}
	}
}

// TestHeaderTypesTravelAsSent publishes a message with headers of every
// AMQP type with a raw client, dead-letters it, ingests it into the
// catalog and redrives it, then reads the redriven copy with a raw client:
// decimals stay decimals, unsigned integers stay unsigned, nested tables
// and byte arrays stay what they were — on the DLQ copy, in the catalog
// and after redrive.
func TestHeaderTypesTravelAsSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := randomQueue("wire.types", lily.QueueConfig{})
	tr := openDeclared(t, qc)
	_, ch := rawChannel(t)
	orig := foreignHeaders()
	const id = "foreign-typed-1"
	if err := ch.PublishWithContext(ctx, "", qc.Name, true, false, amqp.Publishing{MessageId: id, Headers: orig, Body: []byte("typed")}); err != nil {
		t.Fatal(err)
	}
	out := newOutcomes()
	calls := 0
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		calls++
		if calls == 1 {
			if got := d.Headers["price"]; got != (transport.Decimal{Scale: 2, Value: 1234}) {
				t.Errorf("handler sees price = %T %#v, want transport.Decimal 12.34", got, got)
			}
			if got := d.Headers["u8"]; got != uint8(200) {
				t.Errorf("handler sees u8 = %T %#v, want uint8(200)", got, got)
			}
			return lily.Permanent(errors.New("rejected by the test"))
		}
		return nil // the redriven copy, if a consumer ever saw it
	}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 20 * time.Millisecond, Hooks: []lily.Hook{out.hook()}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	transporttest.RunUntil(t, c, 30*time.Second, func() bool { return out.count(out.dead) == 1 })

	// The DLQ copy, read raw.
	d, ok, err := ch.Get(rabbitmq.DeadLetterQueue(qc.Name), false)
	if err != nil || !ok {
		t.Fatalf("no dead letter (%v)", err)
	}
	sameTypes(t, "DLQ copy", d.Headers, orig)
	if d.Headers[evidence.HeaderReason] != "permanent" {
		t.Errorf("DLQ copy reason %#v, want permanent", d.Headers[evidence.HeaderReason])
	}
	if err := d.Nack(false, true); err != nil {
		t.Fatal(err)
	}

	// The catalog entry.
	cat := tempCatalog(t)
	transporttest.WaitFor(t, "the dead letter back in its DLQ", func() bool {
		n, err := tr.DeadLetterDepth(ctx, qc.Name)
		return err == nil && n == 1
	})
	if n, err := cat.Ingest(ctx, tr, qc.Name); err != nil || n != 1 {
		t.Fatalf("ingest: %d (%v), want 1", n, err)
	}
	es, err := cat.List(ctx, catalog.Filter{Queue: qc.Name}, 0)
	if err != nil || len(es) != 1 {
		t.Fatalf("catalog holds %d entries (%v), want 1", len(es), err)
	}
	e, err := cat.Get(ctx, es[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	wantLily := transport.Headers{
		"price": transport.Decimal{Scale: 2, Value: 1234}, "neg": transport.Decimal{Scale: 3, Value: -5},
		"u8": uint8(200), "u16": uint16(math.MaxUint16), "u32": uint32(math.MaxUint32), "i8": int8(-7),
		"bin":   []byte{0, 1, 0xfe, 0xff},
		"table": map[string]any{"d": transport.Decimal{Scale: 1, Value: 7}, "u8": uint8(1), "inner": map[string]any{"u16": uint16(2), "bin": []byte("x")}},
		"array": []any{uint8(3), transport.Decimal{Value: 9}, uint32(4), map[string]any{"u32": uint32(5)}, []any{int8(-1)}},
	}
	for k, w := range wantLily {
		if g := e.Headers[k]; !reflect.DeepEqual(g, w) {
			t.Errorf("catalog entry: header %q = %T %#v, want %T %#v", k, g, g, w, w)
		}
	}

	// Redrive, and read the redriven copy raw.
	res, err := redrive.New(cat).Redrive(ctx, redrive.Params{Filter: catalog.Filter{Queue: qc.Name},
		Target: func(context.Context, string) (redrive.Publisher, error) { return tr, nil }})
	if err != nil || res.Redriven != 1 {
		t.Fatalf("redrive: %+v (%v), want 1 redriven", res, err)
	}
	var r amqp.Delivery
	transporttest.WaitFor(t, "the redriven copy", func() bool {
		var ok bool
		r, ok, err = ch.Get(qc.Name, false)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})
	sameTypes(t, "redriven copy", r.Headers, orig)
	if r.MessageId != id || string(r.Body) != "typed" {
		t.Errorf("redriven copy: message_id %q body %q", r.MessageId, r.Body)
	}
	if err := r.Ack(false); err != nil {
		t.Fatal(err)
	}
	out.mu.Lock()
	out.acked[id]++ // consumed and acknowledged by the raw client above
	out.mu.Unlock()
	conserveForeign(t, tr, cat, qc.Name, []string{id}, out.acked)
}
