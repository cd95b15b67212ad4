package ledger

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/pgtest"

	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/transport"
)

// clock is a simulated clock for Accounted.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// eventRows counts the per-event ledger rows.
func eventRows(t *testing.T, s *catalog.Store) int64 {
	t.Helper()
	var n int64
	if err := s.DB().QueryRow(`SELECT COUNT(*) FROM lily_ledger_events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// receiveAck receives everything queued on b through a and acks it.
func receiveAck(t *testing.T, a *Accounted, queue string) int {
	t.Helper()
	ctx := context.Background()
	total := 0
	for {
		ds, err := a.Receive(ctx, &transport.ReceiveParams{Queue: queue, Max: 100, Consumer: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			return total
		}
		ss := make([]transport.Settlement, len(ds))
		for i, d := range ds {
			ss[i] = transport.Settlement{Delivery: d, Action: transport.Ack}
		}
		if err := a.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
			t.Fatal(err)
		}
		total += len(ds)
	}
}

// TestPruneLedgerFoldsExactly: pruning deletes exactly the rows older than
// the horizon, records them in lily_ledger_pruned, and changes no figure
// of the ledger (reconcile before = after).
func TestPruneLedgerFoldsExactly(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		if err := l.SetHorizon(10 * time.Hour); err != nil {
			t.Fatal(err)
		}
		clk := &clock{now: testNow}
		b := &fakeBroker{}
		a := AccountWith(b, l, AccountOptions{PruneEvery: -1, Now: clk.Now})
		// 5 hours of traffic, 4 messages an hour, on two queues; hour 5 also
		// dead-letters one (accepted, never acked).
		for h := range 5 {
			for i := range 4 {
				q := []string{"orders", "billing"}[i%2]
				b.queued = append(b.queued, delivery(q, fmt.Sprintf("m%d-%d", h, i), "body"))
			}
			receiveAck(t, a, "orders")
			clk.advance(time.Hour)
		}
		b.queued = append(b.queued, delivery("orders", "dl", "x"))
		if ds, err := a.Receive(ctx, &transport.ReceiveParams{Queue: "orders", Max: 10}); err != nil || len(ds) != 1 {
			t.Fatalf("receive %d, %v", len(ds), err)
		}
		if err := s.Insert(ctx, catalog.NewEntry("orders", transport.Message{EventID: "dl", Body: []byte("x")}, nil, "permanent", clk.Now())); err != nil {
			t.Fatal(err)
		}
		before, err := l.Rows(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := eventRows(t, s); got != 21 {
			t.Fatalf("event rows %d, want 21 (one per message: 20 acked, 1 accepted)", got)
		}
		// Prune 8 h later (testNow+13h) with the 10 h horizon: the cutoff is
		// testNow+3h, so the rows of hours 0, 1 and 2 (12 rows) are folded.
		res, err := l.Prune(ctx, clk.Now().Add(8*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if want := testNow.Add(3 * time.Hour); !res.Cutoff.Equal(want) || res.Events != 12 {
			t.Errorf("pruned %d rows before %v, want 12 before %v", res.Events, res.Cutoff, want)
		}
		if got := eventRows(t, s); got != 9 {
			t.Errorf("event rows %d after the prune, want 9", got)
		}
		after, err := l.Rows(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(before) != fmt.Sprint(after) {
			t.Errorf("ledger changed by pruning:\nbefore %+v\nafter  %+v", before, after)
		}
		for _, r := range after {
			if !r.Balanced() || r.Accepted != map[string]int64{"orders": 11, "billing": 10}[r.Queue] {
				t.Errorf("ledger %+v, want balanced with 11 (orders) or 10 (billing) accepted", r)
			}
		}
		st, err := l.Events(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var kept, pruned int64
		for _, e := range st {
			kept += e.Kept
			pruned += e.Pruned
			if e.Pruned > 0 && !e.PrunedThrough.Equal(res.Cutoff) {
				t.Errorf("%s pruned through %v, want %v", e.Queue, e.PrunedThrough, res.Cutoff)
			}
		}
		if kept != 9 || pruned != 12 {
			t.Errorf("LedgerEvents kept %d pruned %d, want 9 and 12: %+v", kept, pruned, st)
		}
		// A second prune at the same time finds nothing.
		if res, err := l.Prune(ctx, clk.Now().Add(8*time.Hour)); err != nil || res.Events != 0 {
			t.Errorf("second prune: %d rows, %v; want 0", res.Events, err)
		}
	})
}

// TestPruneLedgerConcurrent: two processes (two stores on one
// SQLite file) pruning at once delete every old row exactly once between
// them, and the ledger's figures do not move.
func TestPruneLedgerConcurrent(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { pruneConcurrent(t, filepath.Join(t.TempDir(), "catalog.db")) })
	t.Run("postgres", func(t *testing.T) { pruneConcurrent(t, pgtest.URL(t)) })
}

func pruneConcurrent(t *testing.T, path string) {
	ctx := context.Background()
	s1, err := catalog.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := catalog.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	const n = 2*pruneBatch + 1 // 2n rows: several batches for the two pruners
	// 2n messages, n accepted and n acked, long ago, written in one
	// statement (countMany row by row is slow under -race).
	if _, err := New(s1).db.ExecContext(ctx, `WITH RECURSIVE i(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM i WHERE x + 1 < CAST(? AS INTEGER))
		INSERT INTO lily_ledger_events(queue, kind, event_id, at) SELECT 'q', k.kind, k.kind || x, CAST(? AS BIGINT) FROM i,
			(SELECT 'accepted' AS kind UNION ALL SELECT 'acked') AS k`, n, testNow.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if err := New(s1).AddCounts(ctx, "q", n, n); err != nil {
		t.Fatal(err)
	}
	before := ledgerOf(t, s1, "q")
	var wg sync.WaitGroup
	results := make([]PruneResult, 2)
	errs := make([]error, 2)
	for i, s := range []*catalog.Store{s1, s2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = New(s).Prune(ctx, testNow.Add(DefaultHorizon+time.Minute))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := results[0].Events + results[1].Events; got != 2*n {
		t.Errorf("the two pruners deleted %d + %d rows, want %d in all", results[0].Events, results[1].Events, 2*n)
	}
	if got := eventRows(t, s2); got != 0 {
		t.Errorf("%d rows left", got)
	}
	st, err := New(s2).Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Pruned != 2*n || st[0].Kept != 0 {
		t.Errorf("LedgerEvents %+v, want q with %d pruned, 0 kept", st, 2*n)
	}
	if after := ledgerOf(t, s2, "q"); after != before || after.Accepted != n || !after.Balanced() {
		t.Errorf("ledger %+v after the prunes, want %+v (%d accepted, balanced)", after, before, n)
	}
}

// TestRedeliveryWithinHorizon: a message redelivered (and acked again)
// within the horizon, after a prune, is counted once; one redelivered
// after the horizon is counted again — accepted and acked both, so the
// ledger still balances (the documented trade-off, docs/ledger.md).
func TestRedeliveryWithinHorizon(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		clk := &clock{now: testNow}
		b := &fakeBroker{}
		a := AccountWith(b, l, AccountOptions{PruneEvery: -1, Now: clk.Now})
		b.queued = []*transport.Delivery{delivery("q", "m1", "x")}
		receiveAck(t, a, "q")
		clk.advance(DefaultHorizon - time.Hour)
		if res, err := l.Prune(ctx, clk.Now()); err != nil || res.Events != 0 {
			t.Fatalf("prune within the horizon: %d rows, %v; want 0", res.Events, err)
		}
		redelivered := delivery("q", "m1", "x")
		redelivered.DeliveryCount = 2
		b.queued = []*transport.Delivery{redelivered}
		receiveAck(t, a, "q")
		if r := ledgerOf(t, s, "q"); r.Accepted != 1 || r.Acked != 1 {
			t.Errorf("within the horizon: ledger %+v, want 1 accepted, 1 acked", r)
		}
		clk.advance(2 * time.Hour)
		if res, err := l.Prune(ctx, clk.Now()); err != nil || res.Events != 1 {
			t.Fatalf("prune past the horizon: %d rows, %v; want 1 (the message's acked row)", res.Events, err)
		}
		if r := ledgerOf(t, s, "q"); r.Accepted != 1 || r.Acked != 1 {
			t.Errorf("after the prune: ledger %+v, want 1 accepted, 1 acked (pruning folds, changes nothing)", r)
		}
		b.queued = []*transport.Delivery{redelivered}
		receiveAck(t, a, "q")
		if r := ledgerOf(t, s, "q"); r.Accepted != 2 || r.Acked != 2 || !r.Balanced() {
			t.Errorf("past the horizon: ledger %+v, want 2 accepted, 2 acked, balanced", r)
		}
	})
}

// TestAccountedPrunesAutomatically: with PruneEvery, an Accounted that
// records rows prunes on its own, and the rows stay within the horizon.
func TestAccountedPrunesAutomatically(t *testing.T) {
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		if err := l.SetHorizon(time.Hour); err != nil {
			t.Fatal(err)
		}
		clk := &clock{now: testNow}
		b := &fakeBroker{}
		a := AccountWith(b, l, AccountOptions{PruneEvery: 50, Now: clk.Now})
		// 10 messages a minute for 3 hours: 2 rows each.
		for m := range 180 {
			for i := range 10 {
				b.queued = append(b.queued, delivery("q", fmt.Sprintf("m%d-%d", m, i), "x"))
			}
			receiveAck(t, a, "q")
			a.prune.wg.Wait() // the background prune, if one started
			clk.advance(time.Minute)
		}
		// At most the last hour's messages (one row each), plus what arrived
		// since the last prune.
		if got, limit := eventRows(t, s), int64(60*10+50); got > limit {
			t.Errorf("%d event rows, want at most %d (horizon × rate + PruneEvery)", got, limit)
		}
		if r := ledgerOf(t, s, "q"); r.Accepted != 1800 || r.Acked != 1800 {
			t.Errorf("ledger %+v, want 1800 accepted and acked", r)
		}
	})
}

// TestSetLedgerHorizon refuses a horizon that is not positive.
func TestSetLedgerHorizon(t *testing.T) {
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		if l.Horizon() != DefaultHorizon {
			t.Errorf("default horizon %v, want %v", l.Horizon(), DefaultHorizon)
		}
		if err := l.SetHorizon(0); err == nil {
			t.Error("horizon 0 accepted")
		}
		if err := l.SetHorizon(36 * time.Hour); err != nil || l.Horizon() != 36*time.Hour {
			t.Errorf("SetHorizon(36h): %v, horizon %v", err, l.Horizon())
		}
	})
}

// TestOneRowPerMessage: the ack turns a message's accepted row into its
// acked row (one row per message); a redelivered ack adds nothing, also
// on rows of the two-row layout written before; an ack without an
// accepted row gets a row of its own and is counted.
func TestOneRowPerMessage(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		clk := &clock{now: testNow}
		b := &fakeBroker{queued: []*transport.Delivery{delivery("q", "m1", "x")}}
		a := AccountWith(b, l, AccountOptions{PruneEvery: -1, Now: clk.Now})
		receiveAck(t, a, "q")
		var kind string
		var at int64
		if err := s.DB().QueryRow(`SELECT kind, at FROM lily_ledger_events`).Scan(&kind, &at); err != nil || kind != "acked" || at != testNow.UnixMilli() {
			t.Fatalf("row %q at %d (%v), want the one acked row", kind, at, err)
		}
		// Two-row layout: m2 accepted and acked in rows of their own. On
		// PostgreSQL migration 7 keeps only the acked row of such a pair
		// (a message's row is unique there): that is what a catalog
		// written before holds.
		k2 := Key("m2", []byte("y"))
		kinds, wantRows := []string{"accepted", "acked"}, int64(4)
		if s.Kind() == "postgres" {
			kinds, wantRows = []string{"acked"}, 3
		}
		for _, kind := range kinds {
			if _, err := l.db.ExecContext(ctx, `INSERT INTO lily_ledger_events(queue, kind, event_id, at) VALUES ('q', ?, ?, 1)`, kind, k2); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.AddCounts(ctx, "q", 1, 1); err != nil {
			t.Fatal(err)
		}
		clk.advance(time.Minute)
		b.queued = []*transport.Delivery{delivery("q", "m1", "x"), delivery("q", "m2", "y")}
		receiveAck(t, a, "q")
		if r := ledgerOf(t, s, "q"); r.Accepted != 2 || r.Acked != 2 {
			t.Errorf("after redeliveries: ledger %+v, want 2 accepted, 2 acked", r)
		}
		// m3 was accepted elsewhere (its row pruned): its ack is counted.
		if err := a.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: delivery("q", "m3", "z"), Action: transport.Ack}}}); err != nil {
			t.Fatal(err)
		}
		if r := ledgerOf(t, s, "q"); r.Acked != 3 {
			t.Errorf("acked %d, want 3", r.Acked)
		}
		if got := eventRows(t, s); got != wantRows {
			t.Errorf("%d rows, want %d (m1, m2's row(s), m3)", got, wantRows)
		}
	})
}

// TestRunLedgerPruner: the loop for lily serve prunes at once, then every
// interval, until its context ends; a non-positive interval is refused.
func TestRunLedgerPruner(t *testing.T) {
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		if err := l.RunPruner(context.Background(), 0, nil); err == nil {
			t.Error("interval 0 accepted")
		}
		if _, err := l.countMany(context.Background(), "accepted", map[string][]string{"q": {"old"}}, time.Now().Add(-DefaultHorizon-time.Hour)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.RunPruner(ctx, time.Hour, nil) }()
		waittest.ForState(t, "the pruner to prune the old row", func() (bool, string) {
			n := eventRows(t, s)
			return n == 0, fmt.Sprintf("%d event rows", n)
		})
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("RunLedgerPruner returned %v, want context.Canceled", err)
		}
		if r := ledgerOf(t, s, "q"); r.Accepted != 1 {
			t.Errorf("accepted %d, want 1", r.Accepted)
		}
	})
}
