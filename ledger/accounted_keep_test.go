package ledger

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
)

// leaseBroker is a lease-based holdBroker (NATS, SQS): its leases last
// lease, and it records every extension, signalling each on extended.
type leaseBroker struct {
	*holdBroker
	lease    time.Duration
	mu       sync.Mutex
	ext      []transport.ExtendParams
	extended chan struct{}
}

func (b *leaseBroker) Features() transport.Features {
	return transport.Features{Leases: true, VisibilityTimeout: b.lease}
}

func (b *leaseBroker) ExtendLeases(_ context.Context, p *transport.ExtendParams) error {
	b.mu.Lock()
	b.ext = append(b.ext, *p)
	b.mu.Unlock()
	select {
	case b.extended <- struct{}{}:
	default:
	}
	return nil
}

func (b *leaseBroker) extensions() []transport.ExtendParams {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]transport.ExtendParams(nil), b.ext...)
}

// TestReceiveKeepsLeasesOfAHeldBatch: on a lease-based broker a batch held
// through a catalog outage keeps its leases — extended for the receiving
// consumer, every delivery of it, for the broker's lease — so that the
// broker does not hand the messages to another reader, their counts
// raised, while this one still holds them. Once the batch is handed out
// (the catalog answers) the Accounted extends nothing more: the consumer
// does. A batch held at StopConsumer is given back and its keeper ends.
func TestReceiveKeepsLeasesOfAHeldBatch(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		b := &leaseBroker{holdBroker: &holdBroker{fakeBroker: &fakeBroker{queued: threeDeliveries()}},
			lease: 50 * time.Millisecond, extended: make(chan struct{}, 1)}
		a := AccountWith(b, New(s), AccountOptions{})
		repair := breakCatalog(t, s)
		if ds, err := a.Receive(ctx, recv); len(ds) != 0 || err == nil {
			t.Fatalf("receive with the catalog down: %d deliveries, %v; want the batch held", len(ds), err)
		}
		for range 2 {
			select {
			case <-b.extended:
			case <-time.After(10 * time.Second):
				t.Fatalf("no lease extension of the held batch within 10 s (lease %v)", b.lease)
			}
		}
		for _, e := range b.extensions() {
			if e.Consumer != "c1" || len(e.Deliveries) != 3 || e.For != b.lease {
				t.Fatalf("extension %+v: want the 3 held deliveries of c1, for the broker's lease", e)
			}
		}
		hb := heldOf(t, a, "c1")
		repair()
		ds, err := a.Receive(ctx, recv)
		if err != nil || len(ds) != 3 {
			t.Fatalf("receive after the catalog is back: %d deliveries, %v", len(ds), err)
		}
		ended(t, hb, "the batch was handed out")
		if r := ledgerOf(t, s, "q"); r.Accepted != 3 {
			t.Errorf("accepted %d after the held batch was handed out, want 3 (counted once)", r.Accepted)
		}

		// Held again, then stopped: the keeper ends with the stop.
		b.queued = []*transport.Delivery{delivery("q", "d", "4")}
		repair = breakCatalog(t, s)
		defer repair()
		if _, err := a.Receive(ctx, recv); !errors.Is(err, ErrCatalogUnavailable) {
			t.Fatalf("receive with the catalog down again: %v, want ErrCatalogUnavailable", err)
		}
		hb = heldOf(t, a, "c1")
		// No way to give it back uncounted here (no Unreceive, no bucket):
		// StopConsumer says so and leaves it to the broker, never released.
		if err := a.StopConsumer(ctx, &transport.StopParams{Queue: "q", Consumer: "c1"}); err == nil {
			t.Error("StopConsumer with a held batch it cannot give back: no error, want one naming it")
		}
		ended(t, hb, "StopConsumer")
		noRelease(t, b.fakeBroker)
	})
}

// heldOf returns the batch a holds for consumer of queue q.
func heldOf(t *testing.T, a *Accounted, consumer string) *heldBatch {
	t.Helper()
	a.hold.mu.Lock()
	defer a.hold.mu.Unlock()
	hb := a.hold.m[holdKey{queue: "q", consumer: consumer}]
	if hb == nil || hb.keeper == nil {
		t.Fatalf("no held batch with a lease keeper for %s: %+v", consumer, hb)
	}
	return hb
}

// ended checks that hb's keeper was ended once after happened: it
// extends nothing more (end waits for an extension in flight).
func ended(t *testing.T, hb *heldBatch, after string) {
	t.Helper()
	if !hb.keeper.ended() {
		t.Errorf("the lease keeper still runs after %s", after)
	}
}
