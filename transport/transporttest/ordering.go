package transporttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// OrderingHarness runs the per-key ordering scenarios (docs/design.md §4, ordering
// "park" and "block") on a transport whose parked messages land in a
// catalog.
type OrderingHarness struct {
	// Name is the transport's name in QueueConfig.Transport.
	Name string
	// Open returns, for one subtest, a transport with the CatalogParking
	// feature (the SQLite transport, or a broker transport wrapped with
	// ledger.Account) and its catalog. The scenario closes neither.
	Open func(t *testing.T) (transport.Transport, *catalog.Store)
	// Teardown, when set, removes a subtest's queue after it ended.
	Teardown func(ctx context.Context, tr transport.Transport, spec transport.QueueSpec) error
	// LogTransport is set for a log (Kafka): ordering "block" holds a
	// whole partition there, not a key, so the block scenarios — which
	// expect the other keys to flow — are left to the transport's own
	// partition test, and only "park" runs.
	LogTransport bool
}

// orderingScenario is how the head of the poisoned key is dealt with.
type orderingScenario struct {
	name     string
	mode     string
	resolve  string // "unpark", "redrive" or "discard"
	expected []int  // K's messages processed, in order
}

// RunOrdering runs the ordering scenarios as parallel subtests: four keys,
// their messages interleaved; one message of key K fails permanently until
// it is "fixed", one of key B fails once transiently. The other keys must
// be fully processed while K waits; K's later messages must wait (parked
// entries) and, once the head is dealt with — unparked, redriven or
// discarded — be processed in their publish order; and the ledger must
// balance.
func RunOrdering(t *testing.T, h OrderingHarness) {
	for _, sc := range []orderingScenario{
		{name: "park/unpark", mode: lily.OrderingPark, resolve: "unpark", expected: []int{0, 1, 2, 3, 4, 5, 6}},
		{name: "block/redrive", mode: lily.OrderingBlock, resolve: "redrive", expected: []int{0, 1, 2, 3, 4, 5, 6}},
		{name: "block/discard", mode: lily.OrderingBlock, resolve: "discard", expected: []int{0, 1, 3, 4, 5, 6}},
	} {
		if h.LogTransport && sc.mode == lily.OrderingBlock {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			runOrdering(t, h, sc)
		})
	}
}

// orderLog records, per key, the sequence numbers whose handler succeeded
// and every call.
type orderLog struct {
	mu    sync.Mutex
	ok    map[string][]int
	calls map[string][]int
}

func (l *orderLog) add(key string, seq int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[key] = append(l.calls[key], seq)
	if ok {
		l.ok[key] = append(l.ok[key], seq)
	}
}

// firsts returns key's successful sequence numbers, duplicates (an
// at-least-once redelivery) after their first success left out.
func (l *orderLog) firsts(key string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []int
	for _, s := range l.ok[key] {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func runOrdering(t *testing.T, h OrderingHarness, sc orderingScenario) {
	ctx := context.Background()
	tr, store := h.Open(t)
	q := lily.QueueConfig{Name: uniqueQueue(t), Transport: h.Name, Ordering: sc.mode,
		RetryAttempts: 1, RetryBackoffMillis: new(int64(50)), MaxRetryBackoffMillis: new(int64(50)), Breaker: new(bool)}.WithDefaults()
	spec := q.Spec()
	if err := tr.(transport.Declarer).Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{spec}}); err != nil {
		t.Fatal(err)
	}
	if h.Teardown != nil {
		t.Cleanup(func() { _ = h.Teardown(context.Background(), tr, spec) })
	}
	keys := []string{"A", "B", "C", "K"}
	const perKey = 6
	var msgs []lily.Message
	for i := range perKey {
		for _, k := range keys {
			msgs = append(msgs, lily.Message{Key: k, Body: fmt.Appendf(nil, "%s/%d", k, i)})
		}
	}
	if err := lily.Publish(ctx, tr, q.Name, msgs); err != nil {
		t.Fatal(err)
	}
	log := &orderLog{ok: map[string][]int{}, calls: map[string][]int{}}
	var fixed, bFailed atomic.Bool
	handler := lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		var key string
		var seq int
		if _, err := fmt.Sscanf(string(d.Body), "%1s/%d", &key, &seq); err != nil {
			return lily.Permanent(err)
		}
		switch {
		case key == "K" && seq == 2 && !fixed.Load():
			log.add(key, seq, false)
			return lily.Permanent(errors.New("order K/2 references a retired SKU"))
		case key == "B" && seq == 1 && !bFailed.Swap(true):
			log.add(key, seq, false)
			return errors.New("inventory service timed out")
		}
		log.add(key, seq, true)
		return nil
	})
	c, err := lily.NewConsumer(tr, handler, lily.ConsumerOptions{Queue: q, Concurrency: 4, Prefetch: 32,
		ReceiveWait: 50 * time.Millisecond, Keys: redrive.NewKeys(store), KeyPoll: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(newTestWriter(t), nil))})
	if err != nil {
		t.Fatal(err)
	}
	stop := Start(t, c)

	// Every other key is processed in full while K waits behind its head.
	WaitFor(t, "keys A, B and C processed and K's head parked", func() bool {
		for _, k := range keys[:3] {
			if len(log.firsts(k)) < perKey {
				return false
			}
		}
		hk, err := redrive.NewKeys(store).HeldKeys(ctx, q.Name)
		return err == nil && len(hk) == 1 && hk[0].Parked == perKey-3
	})
	for _, k := range keys[:3] {
		if got, want := log.firsts(k), []int{0, 1, 2, 3, 4, 5}; !slices.Equal(got, want) {
			t.Errorf("key %s processed in order %v, want %v", k, got, want)
		}
	}
	if got := log.firsts("K"); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("key K processed %v while held, want [0 1]", got)
	}
	// One more message of K arrives while K is held: it waits too.
	if err := lily.Publish(ctx, tr, q.Name, []lily.Message{{Key: "K", Body: []byte("K/6")}}); err != nil {
		t.Fatal(err)
	}
	var hk redrive.HeldKey
	WaitFor(t, "K/6 parked behind the head", func() bool {
		ks, err := redrive.NewKeys(store).HeldKeys(ctx, q.Name)
		if err != nil || len(ks) != 1 {
			return false
		}
		hk = ks[0]
		return hk.Parked == perKey-2
	})
	if hk.Key != "K" || hk.Mode != sc.mode || hk.State != redrive.KeyHeld {
		t.Errorf("held key = %+v, want K %s held", hk, sc.mode)
	}
	if d, ok := tr.(transport.DeadLetterDrainer); ok {
		if _, err := store.Ingest(ctx, d, q.Name); err != nil {
			t.Fatal(err)
		}
	}
	ks, err := redrive.NewKeys(store).HeldKeys(ctx, q.Name)
	if err != nil || len(ks) != 1 || ks[0].Head == nil || ks[0].Head.State != catalog.StatePending {
		t.Fatalf("held keys after ingest = %+v, %v: want K with its head pending in the catalog", ks, err)
	}
	head := ks[0].Head

	fixed.Store(true) // the fix is deployed
	target := func(context.Context, string) (redrive.Publisher, error) { return tr, nil }
	switch sc.resolve {
	case "unpark":
		dry, err := redrive.NewKeys(store).Unpark(ctx, redrive.UnparkParams{Queue: q.Name, Key: "K", DryRun: true, Target: target})
		if err != nil || dry.Action != "redrive_head" || dry.Key.Parked != perKey-2 {
			t.Fatalf("unpark --dry-run = %+v, %v", dry, err)
		}
		if _, err := redrive.NewKeys(store).Unpark(ctx, redrive.UnparkParams{Queue: q.Name, Key: "K", Target: target}); err != nil {
			t.Fatal(err)
		}
	case "redrive":
		res, err := redrive.New(store).Redrive(ctx, redrive.Params{Filter: catalog.Filter{IDs: []int64{head.ID}}, Target: target})
		if err != nil || res.Redriven != 1 {
			t.Fatalf("redrive of the head = %+v, %v", res, err)
		}
	case "discard":
		res, err := store.Discard(ctx, catalog.DecideParams{Filter: catalog.Filter{IDs: []int64{head.ID}}, Reason: "K/2 will never be valid"})
		if err != nil || res.Count != 1 {
			t.Fatalf("discard of the head = %+v, %v", res, err)
		}
	}
	WaitFor(t, "key K processed to the end and free", func() bool {
		ks, err := redrive.NewKeys(store).HeldKeys(ctx, q.Name)
		return err == nil && len(ks) == 0 && len(log.firsts("K")) == len(sc.expected)
	})
	if got := log.firsts("K"); !slices.Equal(got, sc.expected) {
		t.Errorf("key K processed in order %v, want %v", got, sc.expected)
	}
	log.mu.Lock()
	calls := slices.Clone(log.calls["K"])
	log.mu.Unlock()
	// Nothing after the head reached the handler before the head's last
	// call (its failure, or its success once fixed).
	last2 := -1
	for i, s := range calls {
		if s == 2 {
			last2 = i
		}
	}
	for i, s := range calls {
		if s > 2 && i < last2 {
			t.Errorf("K/%d reached the handler before K/2 was dealt with: calls %v", s, calls)
		}
	}
	stop()
	checkOrderingLedger(t, ctx, tr, store, q.Name, len(msgs)+1, sc.resolve == "discard")
}

// checkOrderingLedger checks conservation at the end of a scenario: every
// message acked, the discarded head (if any) discarded with a record,
// nothing parked, dead-lettered or lost.
func checkOrderingLedger(t *testing.T, ctx context.Context, tr transport.Transport, store *catalog.Store, queue string, published int, discarded bool) {
	t.Helper()
	ifc, _ := tr.(transport.InFlightCounter)
	var row ledger.Row
	WaitFor(t, "the ledger of "+queue+" settled", func() bool {
		rows, err := ledger.New(store).Rows(ctx, ifc)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Queue == queue {
				row = r
				return r.InFlight == 0
			}
		}
		return false
	})
	wantDiscarded := int64(0)
	if discarded {
		wantDiscarded = 1
	}
	want := ledger.Row{Queue: queue, Accepted: int64(published), Acked: int64(published) - wantDiscarded, Discarded: wantDiscarded}
	if row != want {
		t.Errorf("ledger = %+v, want %+v\n%s", row, want, ExplainLedger(ctx, store, tr, row))
	}
}
