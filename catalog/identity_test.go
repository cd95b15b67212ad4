package catalog

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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

func ledgerOf(t *testing.T, s *Store, queue string) LedgerRow {
	t.Helper()
	rows, err := s.Ledger(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Queue == queue {
			return r
		}
	}
	return LedgerRow{Queue: queue}
}

func delivery(queue, id, body string) *transport.Delivery {
	return &transport.Delivery{Queue: queue, Message: transport.Message{EventID: id, Body: []byte(body)}, DeliveryCount: 1}
}

// TestAccountedCountsForeignMessagesOnReceive (issue 12 item 3): messages
// the runtime receives without a confirmed lily.Publish are accepted once
// per event ID and body: a redelivery adds nothing, two bodies sharing an
// ID are two messages, a published message is not counted again.
func TestAccountedCountsForeignMessagesOnReceive(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		fb := &fakeBroker{}
		a := Account(fb, s)
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
	eachStore(t, func(t *testing.T, s *Store) {
		if _, err := s.DB().ExecContext(ctx, `INSERT INTO lily_ledger_events(queue, kind, event_id, at) VALUES ('q', 'accepted', 'old', 1)`); err != nil {
			t.Fatal(err)
		}
		if err := s.count(ctx, "q", "accepted", []string{ledgerKey("old", []byte("x")), ledgerKey("new", []byte("x"))}); err != nil {
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
	eachStore(t, func(t *testing.T, s *Store) {
		fb := &fakeBroker{failSettle: true}
		a := Account(fb, s)
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
		if err := s.Each(ctx, Filter{Queue: "q"}, func(*Entry) error { n++; return nil }); err != nil {
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

// TestDuplicateIsTheSameDeadLettering (issue 12 item 1): two dead letters
// are merged only when event ID, body, source and coordinates agree — a
// shared event ID alone keeps both.
func TestDuplicateIsTheSameDeadLettering(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		dl := func(id, body string, at time.Time, partition int32, offset int64) *transport.Delivery {
			h := transport.Headers{}
			evidence.Record{Reason: evidence.ReasonPermanent, Source: "kafka/t", DeadLetteredAt: at,
				SourcePartition: partition, HasPartition: true, SourceOffset: offset, HasOffset: true}.Apply(h)
			return &transport.Delivery{Queue: "t", Message: transport.Message{EventID: id, Body: []byte(body), Headers: h}}
		}
		ingest := func(ds ...*transport.Delivery) {
			t.Helper()
			es := make([]*Entry, len(ds))
			for i, d := range ds {
				es[i] = EntryFromDeadLetter("t", d, testNow)
			}
			if err := s.Insert(ctx, es...); err != nil {
				t.Fatal(err)
			}
		}
		first := dl("e", "body-1", testNow, 0, 5)
		ingest(first,
			dl("e", "body-2", testNow, 0, 6),                  // same ID, other body: another message
			dl("e", "body-1", testNow, 1, 5),                  // same ID and body, other partition
			dl("e", "body-1", testNow.Add(time.Minute), 0, 5), // the same message dead-lettered again (ack lost)
		)
		ingest(first) // ingested again: nothing added, not a duplicate either
		var entries []*Entry
		if err := s.Each(ctx, Filter{Queue: "t"}, func(e *Entry) error { entries = append(entries, e); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(entries) != 3 {
			t.Fatalf("%d entries, want 3 (body-1@p0/o5, body-2, body-1@p1/o5)", len(entries))
		}
		var dups int
		if err := s.DB().QueryRowContext(ctx, `SELECT SUM(duplicates) FROM lily_dlq_entries`).Scan(&dups); err != nil {
			t.Fatal(err)
		}
		if dups != 1 || entries[0].SourceCoords != "p0/o5" {
			t.Errorf("duplicates %d (want 1: the second dead-lettering of body-1@p0/o5), coords %q", dups, entries[0].SourceCoords)
		}
	})
}
