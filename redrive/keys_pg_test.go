package redrive

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/internal/catalogtest"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/transport"
)

// lockedSent is sent for publishers on several goroutines.
type lockedSent struct {
	mu sync.Mutex
	sent
}

func (s *lockedSent) Publish(ctx context.Context, p *transport.PublishParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent.Publish(ctx, p)
}

// heldBehindDiscarded holds key on queue orders behind a discarded head,
// with parked entries <key>-1 to <key>-3: an unpark releases the first.
func heldBehindDiscarded(t *testing.T, s *catalog.Store, key string) {
	t.Helper()
	ctx := context.Background()
	head := catalog.NewEntry("orders", transport.Message{EventID: key + "-head", Key: key, Body: []byte("h")},
		evidenceHeaders(evidence.ReasonPermanent, "*errors.errorString", "bad", "v1", 1, 0, 0), "", testNow)
	if err := s.Insert(ctx, head); err != nil {
		t.Fatal(err)
	}
	if err := NewKeys(s).HoldKey(ctx, "orders", key, KeyModePark, KeyHeld, head.EventID); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		park(t, s, "orders", key, fmt.Sprintf("%s-%d", key, i))
	}
	if _, err := s.Discard(ctx, catalog.DecideParams{Filter: catalog.Filter{IDs: []int64{head.ID}}, Reason: "not valid, ever"}); err != nil {
		t.Fatal(err)
	}
}

func unparkParams(key string, pub Publisher) UnparkParams {
	return UnparkParams{Queue: "orders", Key: key, Actor: "t",
		Target: func(context.Context, string) (Publisher, error) { return pub, nil }}
}

// TestPostgresUnparkTakesNoFleetLock: while another process holds key
// b's row, key a is unparked: its first parked entry is released. Before
// issue 29 the advance took the catalog's lock exclusively and waited.
func TestPostgresUnparkTakesNoFleetLock(t *testing.T) {
	ss := catalogtest.PGFleet(t, 2)
	ctx := context.Background()
	heldBehindDiscarded(t, ss[0], "a")
	heldBehindDiscarded(t, ss[0], "b")
	tx, err := catalogdb.Of(ss[0]).BeginKeyed(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var st string
	if err := tx.QueryRowContext(ctx, `SELECT state FROM lily_held_keys WHERE queue = 'orders' AND msg_key = 'b' FOR UPDATE`).Scan(&st); err != nil {
		t.Fatal(err)
	}
	pub := &lockedSent{}
	var res UnparkResult
	if err := pgtest.Finishes(t, "an unpark", func() (err error) {
		res, err = NewKeys(ss[1]).Unpark(ctx, unparkParams("a", pub))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if res.Action != "release_next" || !slices.Equal(pub.ids, []string{"a-1"}) {
		t.Errorf("unpark of a: %s, sent %v; want release_next of a-1", res.Action, pub.ids)
	}
}

// TestPostgresUnparksExact: four processes unpark one key at once: one
// releases its first parked entry, the others find the key moved and do
// nothing. Before, each released the next parked entry: the key's order
// was lost.
func TestPostgresUnparksExact(t *testing.T) {
	ss := catalogtest.PGFleet(t, 4)
	ctx := context.Background()
	heldBehindDiscarded(t, ss[0], "k")
	pub := &lockedSent{}
	actions := make([]string, len(ss))
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Go(func() {
			res, err := NewKeys(s).Unpark(ctx, unparkParams("k", pub))
			if err != nil {
				t.Errorf("unpark from process %d: %v", i, err)
			}
			actions[i] = res.Action
		})
	}
	wg.Wait()
	if !slices.Equal(pub.ids, []string{"k-1"}) {
		t.Errorf("sent %v (actions %v), want k-1 alone", pub.ids, actions)
	}
	if n, _ := ss[0].CountBy(ctx, "state", catalog.Filter{Queue: "orders", Key: "k"}); n["parked"] != 2 || n["redriven"] != 1 {
		t.Errorf("states of k's entries %v, want 1 redriven and 2 still parked", n)
	}
}
