package inbox_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/inbox"
	"github.com/lily-mq/lily/internal/effecttest"
)

// applyVersion runs one handler transaction through the guard: the effect
// sets the entity's state to the message's version.
func applyVersion(t *testing.T, b backend, g inbox.Guard, d *lily.Delivery, e inbox.Entity) (bool, error) {
	ctx := context.Background()
	tx, commit, rollback, err := b.beginE(ctx)
	if err != nil {
		return false, err
	}
	defer rollback()
	applied, err := g.Newer(ctx, tx, d, e, func() error {
		return exec(ctx, tx, `INSERT INTO effects (event_id, entity, amount) VALUES ($1, $2, $3)`, d.EventID, e.ID, e.Version)
	})
	if err != nil {
		return false, err
	}
	return applied, commit()
}

// TestNewerSkipsStale: versions 1, 3, 2, 3, 4 of one order — the 2 (a
// redriven old message landing behind newer ones) and the second 3 are
// stale: acked as no-ops, recorded, never applied.
func TestNewerSkipsStale(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		rec := &effecttest.Recorder{}
		g := inbox.Guard{Hooks: []lily.Hook{rec}}
		var applied []int64
		for _, v := range []int64{1, 3, 2, 3, 4} {
			d := delivery("orders.updated", lily.NewEventID())
			ok, err := applyVersion(t, b, g, d, inbox.Entity{Type: "order", ID: "o-1", Version: v})
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				applied = append(applied, v)
			}
		}
		if len(applied) != 3 || applied[0] != 1 || applied[1] != 3 || applied[2] != 4 {
			t.Fatalf("applied versions %v, want [1 3 4]", applied)
		}
		if n := rec.Kinds(lily.EventStale); n != 2 {
			t.Fatalf("stale events = %d, want 2", n)
		}
		for _, e := range rec.Events() {
			if e.Key != "order/o-1" || e.Queue != "orders.updated" {
				t.Fatalf("stale event %+v: want key order/o-1, queue orders.updated", e)
			}
		}
		v, found, err := inbox.Version(context.Background(), b.db, "order", "o-1")
		if err != nil || !found || v != 4 {
			t.Fatalf("stored version = %d, %v, %v; want 4", v, found, err)
		}
		if n := b.count(t, `SELECT COUNT(*) FROM effects`); n != 3 {
			t.Fatalf("effects = %d, want 3", n)
		}
		// Another entity is independent.
		if ok, err := applyVersion(t, b, g, delivery("orders.updated", lily.NewEventID()),
			inbox.Entity{Type: "order", ID: "o-2", Version: 1}); err != nil || !ok {
			t.Fatalf("o-2 v1: %v, %v", ok, err)
		}
	})
}

// TestNewerConcurrent: versions 1..20 of one entity delivered at once in
// random order by competing handlers: the stored version ends at 20, and
// no applied effect is older than one applied before it.
func TestNewerConcurrent(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		versions := rand.Perm(20)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var order []int64
		for _, v := range versions {
			wg.Go(func() {
				d := delivery("orders.updated", lily.NewEventID())
				ok, err := applyVersion(t, b, inbox.Guard{}, d, inbox.Entity{Type: "order", ID: "hot", Version: int64(v + 1)})
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					order = append(order, int64(v+1))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		v, _, err := inbox.Version(context.Background(), b.db, "order", "hot")
		if err != nil || v != 20 {
			t.Fatalf("stored version %d, %v; want 20", v, err)
		}
		// The effects table holds what was applied: its maximum is 20 and
		// the number of rows is how many were applied.
		if n := b.count(t, `SELECT MAX(amount) FROM effects WHERE entity = 'hot'`); n != 20 {
			t.Fatalf("newest applied state %d, want 20", n)
		}
		if n := b.count(t, `SELECT COUNT(*) FROM effects WHERE entity = 'hot'`); n != int64(len(order)) {
			t.Fatalf("effects %d, applied %d", n, len(order))
		}
	})
}

// TestEntityVersionHeader: AMQP integers and decimal strings are read; a
// missing header is not found; garbage and values < 1 are errors.
func TestEntityVersionHeader(t *testing.T) {
	for _, c := range []struct {
		v     any
		want  int64
		found bool
		bad   bool
	}{
		{int32(7), 7, true, false}, {int64(1 << 40), 1 << 40, true, false}, {uint8(3), 3, true, false},
		{"12", 12, true, false}, {[]byte("5"), 5, true, false}, {"v2", 0, true, true}, {int32(0), 0, true, true},
		{float64(2), 2, true, false}, {float64(2.5), 0, true, true}, {nil, 0, false, false},
	} {
		d := delivery("q", "e")
		if c.v != nil || c.found {
			d.Headers = lily.Headers{inbox.HeaderEntityVersion: c.v}
		}
		got, found, err := inbox.EntityVersion(d)
		if got != c.want || found != c.found || (err != nil) != c.bad {
			t.Errorf("%v (%T): got %d, %v, %v", c.v, c.v, got, found, err)
		}
	}
	if _, err := inbox.Newer(context.Background(), struct{}{}, delivery("q", "e"), inbox.Entity{}, nil); err == nil {
		t.Error("an entity without type, ID and version accepted")
	}
}
