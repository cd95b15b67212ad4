package ledger

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
)

// holdBroker is a fakeBroker that counts its Receive calls and describes
// itself as a broker whose release raises the delivery count (RabbitMQ).
type holdBroker struct {
	*fakeBroker
	mu       sync.Mutex
	receives int
}

func (h *holdBroker) Receive(ctx context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	h.mu.Lock()
	h.receives++
	h.mu.Unlock()
	return h.fakeBroker.Receive(ctx, p)
}

func (h *holdBroker) Features() transport.Features {
	return transport.Features{BrokerDeliveryLimit: true, DelayedRetry: true}
}

func (h *holdBroker) receiveCalls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.receives
}

// unreceiveBroker can give deliveries back uncounted.
type unreceiveBroker struct {
	*holdBroker
	unreceived []*transport.Delivery
	consumer   string
}

func (u *unreceiveBroker) Unreceive(_ context.Context, p *transport.UnreceiveParams) error {
	u.unreceived = append(u.unreceived, p.Deliveries...)
	u.consumer = p.Consumer
	return nil
}

// breakCatalog makes every ledger count fail (the table is gone) until the
// returned function puts it back.
func breakCatalog(t *testing.T, s *catalog.Store) (repair func()) {
	t.Helper()
	if _, err := s.DB().Exec(`ALTER TABLE lily_ledger_events RENAME TO lily_ledger_events_away`); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := s.DB().Exec(`ALTER TABLE lily_ledger_events_away RENAME TO lily_ledger_events`); err != nil {
			t.Fatal(err)
		}
	}
}

func threeDeliveries() []*transport.Delivery {
	ds := []*transport.Delivery{delivery("q", "a", "1"), delivery("q", "b", "2"), delivery("q", "c", "3")}
	ds[1].Headers = transport.Headers{"x-retry-count": int32(1), "app": "v"}
	return ds
}

func noRelease(t *testing.T, b *fakeBroker) {
	t.Helper()
	for _, s := range b.settled {
		if s.Action == transport.Release {
			t.Errorf("delivery %s released: a release raises its delivery count", s.Delivery.EventID)
		}
	}
}

var recv = &transport.ReceiveParams{Queue: "q", Max: 10, Consumer: "c1"}

// TestReceiveHoldsWhileCatalogDown (review finding): when the catalog
// cannot count a batch, Receive neither hands it out nor releases it; it
// holds it and fetches nothing more, and once the catalog answers it hands
// out the same batch, counted once.
func TestReceiveHoldsWhileCatalogDown(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		clk := &clock{now: testNow}
		b := &holdBroker{fakeBroker: &fakeBroker{queued: threeDeliveries()}}
		a := AccountWith(b, l, AccountOptions{Now: clk.Now})
		repair := breakCatalog(t, s)
		for i := range 3 {
			ds, err := a.Receive(ctx, recv)
			if !errors.Is(err, ErrCatalogUnavailable) || len(ds) != 0 {
				t.Fatalf("receive %d with the catalog down: %d deliveries, %v; want none and ErrCatalogUnavailable", i, len(ds), err)
			}
			if !strings.Contains(err.Error(), "holding 3 deliveries of q unacknowledged") {
				t.Errorf("error %q does not say what is held", err)
			}
			clk.advance(10 * time.Second)
		}
		if n := b.receiveCalls(); n != 1 {
			t.Errorf("%d broker receives while holding, want 1 (nothing more fetched)", n)
		}
		if len(b.settled) != 0 {
			t.Errorf("settled %d deliveries while the catalog was down, want none", len(b.settled))
		}
		repair()
		ds, err := a.Receive(ctx, recv)
		if err != nil || len(ds) != 3 || ds[0].EventID != "a" || ds[2].EventID != "c" {
			t.Fatalf("receive after the catalog is back: %d deliveries, %v; want a, b, c", len(ds), err)
		}
		if r := ledgerOf(t, s, "q"); r.Accepted != 3 {
			t.Errorf("accepted %d, want 3", r.Accepted)
		}
		// The held batch is gone: the next Receive asks the broker again, and a
		// redelivery of the same messages adds nothing.
		b.queued = threeDeliveries()
		receiveAck(t, a, "q")
		if n := b.receiveCalls(); n < 2 {
			t.Errorf("broker receives %d after the batch was handed out, want the broker asked again", n)
		}
		if r := ledgerOf(t, s, "q"); r.Accepted != 3 {
			t.Errorf("accepted %d after a redelivery, want 3", r.Accepted)
		}
		noRelease(t, b.fakeBroker)
	})
}

// TestReceiveGivesBackThroughBucket: held past HoldFor on a broker whose
// release raises the count, the batch goes to a retry bucket as new copies
// with the headers as received — no release, not counted — and the copies
// are counted once when they come back.
func TestReceiveGivesBackThroughBucket(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		clk := &clock{now: testNow}
		orig := threeDeliveries()
		b := &holdBroker{fakeBroker: &fakeBroker{queued: orig}}
		a := AccountWith(b, l, AccountOptions{Now: clk.Now, HoldFor: time.Minute,
			HoldDelay: func(q string) time.Duration { return time.Second }})
		repair := breakCatalog(t, s)
		if _, err := a.Receive(ctx, recv); !errors.Is(err, ErrCatalogUnavailable) {
			t.Fatalf("receive: %v, want ErrCatalogUnavailable", err)
		}
		clk.advance(time.Minute)
		_, err := a.Receive(ctx, recv)
		if !errors.Is(err, ErrCatalogUnavailable) || !strings.Contains(err.Error(), "gave the held deliveries back by retry bucket") {
			t.Fatalf("receive past HoldFor: %v, want the batch given back by retry bucket", err)
		}
		if len(b.settled) != 3 {
			t.Fatalf("settled %d, want 3 retry copies", len(b.settled))
		}
		for i, st := range b.settled {
			if st.Action != transport.Retry || st.Delay != time.Second || st.Delivery != orig[i] || !reflect.DeepEqual(st.Headers, orig[i].Headers) {
				t.Errorf("settlement %d: %v delay %v headers %v, want retry after 1s with the headers as received %v", i, st.Action, st.Delay, st.Headers, orig[i].Headers)
			}
		}
		noRelease(t, b.fakeBroker)
		repair()
		if r := ledgerOf(t, s, "q"); r.Accepted != 0 {
			t.Errorf("accepted %d before the copies came back, want 0", r.Accepted)
		}
		b.queued = threeDeliveries()
		receiveAck(t, a, "q")
		if r := ledgerOf(t, s, "q"); r.Accepted != 3 || r.Acked != 3 {
			t.Errorf("ledger %+v, want 3 accepted and acked", r)
		}
	})
}

// TestReceiveGivesBackByUnreceive: a transport that can unreceive gets
// the held batch back that way, for the consumer that received it.
func TestReceiveGivesBackByUnreceive(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		clk := &clock{now: testNow}
		b := &unreceiveBroker{holdBroker: &holdBroker{fakeBroker: &fakeBroker{queued: threeDeliveries()}}}
		a := AccountWith(b, l, AccountOptions{Now: clk.Now, HoldFor: time.Minute})
		breakCatalog(t, s)
		a.Receive(ctx, recv)
		clk.advance(2 * time.Minute)
		if _, err := a.Receive(ctx, recv); err == nil || !strings.Contains(err.Error(), "by unreceive") {
			t.Fatalf("receive past HoldFor: %v, want the batch unreceived", err)
		}
		if len(b.unreceived) != 3 || b.consumer != "c1" || len(b.settled) != 0 {
			t.Errorf("unreceived %d for %q, settled %d; want 3 for c1 and nothing settled", len(b.unreceived), b.consumer, len(b.settled))
		}
	})
}

// TestReceiveKeepsHoldingWithoutAWayBack: with no uncounted way back (no
// Unreceive, no retry bucket) the batch stays held past HoldFor — never
// released — and is counted once when the catalog answers.
func TestReceiveKeepsHoldingWithoutAWayBack(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		clk := &clock{now: testNow}
		b := &holdBroker{fakeBroker: &fakeBroker{queued: threeDeliveries()}}
		a := AccountWith(b, l, AccountOptions{Now: clk.Now, HoldFor: time.Minute})
		repair := breakCatalog(t, s)
		for range 5 {
			if _, err := a.Receive(ctx, recv); !errors.Is(err, ErrCatalogUnavailable) {
				t.Fatalf("receive: %v, want ErrCatalogUnavailable", err)
			}
			clk.advance(time.Minute)
		}
		if len(b.settled) != 0 || b.receiveCalls() != 1 {
			t.Errorf("settled %d, broker receives %d; want 0 and 1", len(b.settled), b.receiveCalls())
		}
		repair()
		if ds, err := a.Receive(ctx, recv); err != nil || len(ds) != 3 {
			t.Fatalf("receive after recovery: %d, %v; want the 3 held", len(ds), err)
		}
		if r := ledgerOf(t, s, "q"); r.Accepted != 3 {
			t.Errorf("accepted %d, want 3", r.Accepted)
		}
	})
}

// TestStopConsumerGivesBackHeld: a consumer stopping while a batch is held
// gets it given back the uncounted way, not left to the session's end.
func TestStopConsumerGivesBackHeld(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		b := &holdBroker{fakeBroker: &fakeBroker{queued: threeDeliveries()}}
		a := AccountWith(b, l, AccountOptions{HoldDelay: func(string) time.Duration { return time.Second }})
		breakCatalog(t, s)
		a.Receive(ctx, recv)
		if err := a.StopConsumer(ctx, &transport.StopParams{Queue: "q", Consumer: "c1"}); err != nil {
			t.Fatal(err)
		}
		if len(b.settled) != 3 || b.settled[0].Action != transport.Retry {
			t.Fatalf("settled %d at stop, want 3 retry copies", len(b.settled))
		}
		noRelease(t, b.fakeBroker)
	})
}

// TestReceiveKeepsHoldingWhenGiveBackFails: a give-back the broker
// refuses leaves the batch held (never released), and it is counted once
// when the catalog answers.
func TestReceiveKeepsHoldingWhenGiveBackFails(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		clk := &clock{now: testNow}
		b := &holdBroker{fakeBroker: &fakeBroker{queued: threeDeliveries(), failSettle: true}}
		a := AccountWith(b, l, AccountOptions{Now: clk.Now, HoldFor: time.Minute,
			HoldDelay: func(string) time.Duration { return time.Second }})
		repair := breakCatalog(t, s)
		a.Receive(ctx, recv)
		clk.advance(time.Minute)
		if _, err := a.Receive(ctx, recv); !errors.Is(err, ErrCatalogUnavailable) || !strings.Contains(err.Error(), "holding 3 deliveries") {
			t.Fatalf("receive with the give-back refused: %v, want the 3 still held", err)
		}
		b.failSettle = false
		repair()
		if ds, err := a.Receive(ctx, recv); err != nil || len(ds) != 3 {
			t.Fatalf("receive after recovery: %d, %v; want the 3 held", len(ds), err)
		}
		if r := ledgerOf(t, s, "q"); r.Accepted != 3 || len(b.settled) != 0 {
			t.Errorf("accepted %d, settled %d; want 3 and 0", r.Accepted, len(b.settled))
		}
	})
}

// TestStopConsumerLeavesAnOrderedQueuesHeldInPlace: on an ordered queue
// over a transport that gives back to the queue's tail (RabbitMQ), a batch
// held at stop is neither given back nor released nor settled: the broker
// returns it in place when the session ends, so no message of a key passes
// an earlier one. Without Ordered the same batch is given back uncounted.
func TestStopConsumerLeavesAnOrderedQueuesHeldInPlace(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		for _, ordered := range []bool{true, false} {
			b := &unreceiveBroker{holdBroker: &holdBroker{fakeBroker: &fakeBroker{queued: threeDeliveries()}}}
			a := AccountWith(b, l, AccountOptions{})
			repair := breakCatalog(t, s)
			if _, err := a.Receive(ctx, recv); !errors.Is(err, ErrCatalogUnavailable) {
				t.Fatalf("receive: %v, want ErrCatalogUnavailable", err)
			}
			if err := a.StopConsumer(ctx, &transport.StopParams{Queue: "q", Consumer: "c1", Ordered: ordered}); err != nil {
				t.Fatal(err)
			}
			repair()
			want := 3
			if ordered {
				want = 0
			}
			if len(b.unreceived) != want || len(b.settled) != 0 {
				t.Errorf("ordered=%v: unreceived %d, settled %d at stop; want %d and 0", ordered, len(b.unreceived), len(b.settled), want)
			}
			noRelease(t, b.fakeBroker)
		}
	})
}

// inPlaceBroker gives deliveries back in place (the SQLite transport: the
// row's lease is cleared, its position kept).
type inPlaceBroker struct{ *unreceiveBroker }

func (b *inPlaceBroker) Features() transport.Features {
	f := b.unreceiveBroker.Features()
	f.UnreceiveInPlace = true
	return f
}

// TestReceiveKeepsAnOrderedQueuesBatchHeldPastHoldFor: a batch of an
// ordered queue held past HoldFor is given back only by a transport that
// gives back in place; over one that would put copies at the queue's tail
// (behind later messages of their keys) it stays held — never released,
// never given back — and is counted once when the catalog answers.
func TestReceiveKeepsAnOrderedQueuesBatchHeldPastHoldFor(t *testing.T) {
	ctx := context.Background()
	ordered := &transport.ReceiveParams{Queue: "q", Max: 10, Consumer: "c1", KeyOrder: true}
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		for _, inPlace := range []bool{false, true} {
			clk := &clock{now: testNow}
			u := &unreceiveBroker{holdBroker: &holdBroker{fakeBroker: &fakeBroker{queued: threeDeliveries()}}}
			var tr transport.Transport = u
			if inPlace {
				tr = &inPlaceBroker{u}
			}
			a := AccountWith(tr, l, AccountOptions{Now: clk.Now, HoldFor: time.Minute,
				HoldDelay: func(string) time.Duration { return time.Second }})
			repair := breakCatalog(t, s)
			rounds := 3 // held past HoldFor twice
			if inPlace {
				rounds = 2 // given back at the first HoldFor; then nothing is held
			}
			for range rounds {
				_, err := a.Receive(ctx, ordered)
				if !errors.Is(err, ErrCatalogUnavailable) {
					t.Fatalf("in place %v: receive: %v, want ErrCatalogUnavailable", inPlace, err)
				}
				clk.advance(time.Minute)
			}
			if inPlace {
				if len(u.unreceived) != 3 || len(u.settled) != 0 {
					t.Errorf("in place: unreceived %d, settled %d; want the 3 given back in place", len(u.unreceived), len(u.settled))
				}
				repair()
				continue
			}
			if len(u.unreceived) != 0 || len(u.settled) != 0 || u.receiveCalls() != 1 {
				t.Errorf("to the tail: unreceived %d, settled %d, broker receives %d; want 0, 0, 1 (held in place)", len(u.unreceived), len(u.settled), u.receiveCalls())
			}
			repair()
			ds, err := a.Receive(ctx, ordered)
			if err != nil || len(ds) != 3 || ds[0].EventID != "a" || ds[2].EventID != "c" {
				t.Fatalf("receive after recovery: %d, %v; want the 3 held, in order", len(ds), err)
			}
			if r := ledgerOf(t, s, "q"); r.Accepted != 3 {
				t.Errorf("accepted %d, want 3", r.Accepted)
			}
			noRelease(t, u.fakeBroker)
		}
	})
}
