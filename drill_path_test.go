package lily_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// TestDrillMessageNeverReachesTheHandler: a drill message (x-lily-drill,
// a non-canonical x-retry-count) is dead-lettered before the handler
// (invalid_retry_count), and its redrive is acked by the runtime without
// the handler (EventDrillAcked), counted by the ledger as an ack. A
// message that only looks like one (x-lily-drill empty) is handled as any.
func TestDrillMessageNeverReachesTheHandler(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := lily.QueueConfig{Name: "orders.created", RetryAttempts: 1}.WithDefaults()
	tr := openSQLite(t, q, time.Minute)
	msgs := []lily.Message{
		{EventID: "drill", Body: []byte(`{}`), Headers: transport.Headers{evidence.HeaderDrill: evidence.DrillMark("drill"), evidence.HeaderRetryCount: "drill"}},
		{EventID: "not-a-drill", Body: []byte(`{}`), Headers: transport.Headers{evidence.HeaderDrill: ""}},
		// A producer's messages that carry a mark but are no redriven drill:
		// another message's mark, and their own mark on a first delivery.
		{EventID: "copied-mark", Body: []byte(`{}`), Headers: transport.Headers{evidence.HeaderDrill: evidence.DrillMark("drill")}},
		{EventID: "unredriven-mark", Body: []byte(`{}`), Headers: transport.Headers{evidence.HeaderDrill: evidence.DrillMark("unredriven-mark")}},
	}
	handled := []string{"not-a-drill", "copied-mark", "unredriven-mark"}
	if err := lily.Publish(ctx, tr, q.Name, msgs); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		events = map[string][]lily.EventKind{}
		called atomic.Int64
	)
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		mu.Lock()
		defer mu.Unlock()
		events[e.EventID] = append(events[e.EventID], e.Kind)
	})
	kinds := func(id string) []lily.EventKind {
		mu.Lock()
		defer mu.Unlock()
		return append([]lily.EventKind(nil), events[id]...)
	}
	handler := lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		if d.EventID == "drill" {
			t.Errorf("the handler was given the drill message (redrive count %d)", d.RedriveCount)
		}
		called.Add(1)
		return nil
	})
	c, err := lily.NewConsumer(tr, handler, lily.ConsumerOptions{Queue: q, ReceiveWait: 20 * time.Millisecond, Hooks: []lily.Hook{hook}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	waittest.For(t, "the drill message dead-lettered and the others acked", func() bool {
		for _, id := range handled {
			if len(kinds(id)) != 1 {
				return false
			}
		}
		return len(kinds("drill")) == 1
	})
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	es, err := cat.List(ctx, catalog.Filter{EventIDs: []string{"drill"}}, 10)
	if err != nil || len(es) != 1 || es[0].Reason != string(evidence.ReasonInvalidRetryCount) {
		t.Fatalf("the drill's dead letter: %v %+v", err, es)
	}
	res, err := redrive.New(cat).Redrive(ctx, redrive.Params{Filter: catalog.Filter{IDs: []int64{es[0].ID}}, Actor: "test",
		Target: func(context.Context, string) (redrive.Publisher, error) { return tr, nil }})
	if err != nil || res.Redriven != 1 {
		t.Fatalf("redrive: %+v %v", res, err)
	}
	waittest.ForState(t, "the redriven drill message acked by the drill path", func() (bool, string) {
		k := kinds("drill")
		return len(k) == 2, fmt.Sprint(k)
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if k := kinds("drill"); k[0] != lily.EventDeadLettered || k[1] != lily.EventDrillAcked {
		t.Errorf("drill message events %v, want dead_lettered then drill_acked", k)
	}
	for _, id := range handled {
		if k := kinds(id); k[0] != lily.EventAcked {
			t.Errorf("%s: events %v; want acked by the handler", id, k)
		}
	}
	if called.Load() != int64(len(handled)) {
		t.Errorf("handler calls %d, want %d (%v)", called.Load(), len(handled), handled)
	}
	// Conservation: every message accepted once and acked; nothing held or in flight.
	rows, err := ledger.New(cat).Rows(ctx, tr)
	if err != nil || len(rows) != 1 {
		t.Fatalf("ledger: %v %+v", err, rows)
	}
	if r := rows[0]; r.Accepted != 4 || r.Acked != 4 || r.DeadLettered != 0 || r.InFlight != 0 || !r.Balanced() {
		t.Errorf("ledger %+v, want 4 accepted and 4 acked, balanced", r)
	}
}
