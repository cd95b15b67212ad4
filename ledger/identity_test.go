package ledger

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// fakeBroker is a broker transport for the Accounted wrapper: Receive hands
// out what was queued, Settle fails while failSettle is set.
type fakeBroker struct {
	mu         sync.Mutex
	queued     []*transport.Delivery
	failSettle bool
	settled    []transport.Settlement
}

func (f *fakeBroker) Publish(context.Context, *transport.PublishParams) error { return nil }
func (f *fakeBroker) Receive(_ context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := min(p.Max, len(f.queued))
	ds := f.queued[:n]
	f.queued = f.queued[n:]
	return ds, nil
}
func (f *fakeBroker) Settle(_ context.Context, p *transport.SettleParams) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failSettle {
		return errors.New("ack lost: channel closed")
	}
	f.settled = append(f.settled, p.Settlements...)
	return nil
}
func (f *fakeBroker) Close() error { return nil }

func ledgerOf(t *testing.T, s *catalog.Store, queue string) Row {
	t.Helper()
	rows, err := New(s).Rows(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Queue == queue {
			return r
		}
	}
	return Row{Queue: queue}
}

// TestAccountedCountsForeignMessagesOnReceive (issue 12 item 3): messages
// the runtime receives without a confirmed lily.Publish are accepted once
// per event ID and body: a redelivery adds nothing, two bodies sharing an
// ID are two messages, a published message is not counted again.
func TestAccountedCountsForeignMessagesOnReceive(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		fb := &fakeBroker{}
		a := Account(fb, l)
		if err := a.Publish(ctx, &transport.PublishParams{Queue: "q", Messages: []transport.Message{{EventID: "pub", Body: []byte("p")}}}); err != nil {
			t.Fatal(err)
		}
		fb.queued = []*transport.Delivery{delivery("q", "pub", "p"), delivery("q", "shared", "a"), delivery("q", "shared", "b"),
			delivery("q", "syn-1", "c"), delivery("q", "syn-1", "c") /* a redelivery */}
		ds, err := a.Receive(ctx, &transport.ReceiveParams{Queue: "q", Max: 10})
		if err != nil || len(ds) != 5 {
			t.Fatalf("receive: %d, %v", len(ds), err)
		}
		if r := ledgerOf(t, s, "q"); r.Accepted != 4 {
			t.Fatalf("accepted %d, want 4 (pub, shared/a, shared/b, syn-1)", r.Accepted)
		}
		var acks []transport.Settlement
		for _, d := range ds {
			acks = append(acks, transport.Settlement{Delivery: d, Action: transport.Ack})
		}
		if err := a.Settle(ctx, &transport.SettleParams{Settlements: acks}); err != nil {
			t.Fatal(err)
		}
		if r := ledgerOf(t, s, "q"); r.Accepted != 4 || r.Acked != 4 || r.Lost != 0 {
			t.Errorf("ledger %+v, want 4 accepted and acked, lost 0", r)
		}
	})
}

// TestLedgerKeyMatchesOlderRows: a message counted by an older Lily (the
// bare event ID) is not counted again under the new key.
func TestLedgerKeyMatchesOlderRows(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		if _, err := s.DB().ExecContext(ctx, `INSERT INTO lily_ledger_events(queue, kind, event_id, at) VALUES ('q', 'accepted', 'old', 1)`); err != nil {
			t.Fatal(err)
		}
		if err := l.count(ctx, "q", "accepted", []string{Key("old", []byte("x")), Key("new", []byte("x"))}); err != nil {
			t.Fatal(err)
		}
		if r := ledgerOf(t, s, "q"); r.Accepted != 1 {
			t.Errorf("accepted %d, want 1 (only the new message)", r.Accepted)
		}
	})
}

// TestParkedInsertIdempotent (issue 12 item 11, parked half): a parked
// entry inserted before the ack failed is not inserted again when the
// message is redelivered and parked again.
func TestParkedInsertIdempotent(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		fb := &fakeBroker{failSettle: true}
		a := Account(fb, l)
		d := delivery("q", "e1", "body")
		d.Key = "K"
		h := transport.Headers{}
		evidence.Record{Reason: evidence.ReasonParked, Source: "rabbitmq/q", DeadLetteredAt: testNow}.Apply(h)
		park := &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: d, Action: transport.DeadLetter, Reason: string(evidence.ReasonParked), Headers: h}}}
		if err := a.Settle(ctx, park); err == nil {
			t.Fatal("settle with a failing ack: want its error")
		}
		fb.failSettle = false
		// The redelivery is parked again, a moment later.
		h2 := transport.Headers{}
		evidence.Record{Reason: evidence.ReasonParked, Source: "rabbitmq/q", DeadLetteredAt: testNow.Add(time.Second), DeliveryCount: 2}.Apply(h2)
		park.Settlements[0].Headers = h2
		if err := a.Settle(ctx, park); err != nil {
			t.Fatal(err)
		}
		n := 0
		if err := s.Each(ctx, catalog.Filter{Queue: "q"}, func(*catalog.Entry) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("%d parked entries after a failed ack and a redelivery, want 1", n)
		}
		if r := ledgerOf(t, s, "q"); r.DeadLettered != 1 {
			t.Errorf("ledger %+v: one parked message", r)
		}
	})
}
