package ledger

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/transport"
)

// openPGStores opens n catalog stores on one PostgreSQL schema, each with
// a connection pool of its own: n consumer processes of a fleet.
func openPGStores(t *testing.T, n int) []*catalog.Store {
	t.Helper()
	u := pgtest.URL(t)
	ss := make([]*catalog.Store, n)
	for i := range ss {
		s, err := catalog.Open(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		ss[i] = s
	}
	return ss
}

// TestPostgresCountingTakesNoFleetLock: while one process holds a catalog
// transaction open (before issue 29 it took the schema's write lock) and has raised
// the queue's lily_ledger row in it, another process counts a batch
// accepted and acked. Counting takes neither: before issue 29 it waited
// for the held transaction (the watchdog below fails it then).
func TestPostgresCountingTakesNoFleetLock(t *testing.T) {
	ss := openPGStores(t, 2)
	ctx := context.Background()
	l0, l1 := New(ss[0]), New(ss[1])
	if err := l0.AddCounts(ctx, "q", 0, 0); err != nil { // the queue's row exists
		t.Fatal(err)
	}
	held, err := catalogdb.Of(ss[0]).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	if err := catalogdb.AddCounts(ctx, held, "q", 5, 0); err != nil { // locks lily_ledger's row of q
		t.Fatal(err)
	}
	// A watchdog, not a timing assertion: it only turns a hang (counting
	// waits for the held transaction, which waits for the test) into a
	// failure.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	a := Account(nopTransport{}, l1)
	ds := []*transport.Delivery{delivery("q", "m1", "a"), delivery("q", "m2", "b")}
	if n, err := l1.countDeliveries(wctx, "accepted", ds, time.Now()); err != nil || n != 2 {
		t.Fatalf("count accepted while a catalog transaction is held: %d, %v (want 2, no wait)", n, err)
	}
	if err := a.Settle(wctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: ds[0], Action: transport.Ack}, {Delivery: ds[1], Action: transport.Ack}}}); err != nil {
		t.Fatalf("count acked while a catalog transaction is held: %v (want no wait)", err)
	}
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	if r := ledgerOf(t, ss[0], "q"); r.Accepted != 7 || r.Acked != 2 {
		t.Errorf("ledger %+v, want accepted 5+2, acked 2", r)
	}
}

// TestPostgresDedupeExactUnderConcurrency: four processes count the same
// messages accepted at once (first receipt by several consumers and the
// publisher's confirm), then two ack them while two count them accepted
// again (late confirms, redeliveries), in overlapping batches in random
// order. Each message is counted accepted once and acked once.
func TestPostgresDedupeExactUnderConcurrency(t *testing.T) {
	const writers, msgs, batch = 4, 400, 25
	ss := openPGStores(t, writers)
	ctx := context.Background()
	keys := make([]string, msgs)
	for i := range keys {
		keys[i] = Key(fmt.Sprintf("m%d", i), []byte("body"))
	}
	phase := func(kinds []string) {
		concurrently(t, writers, func(w int) error {
			l := New(ss[w])
			for _, b := range shuffledBatches(msgs, batch) {
				var ks []string
				for _, j := range b {
					ks = append(ks, keys[j])
				}
				if _, err := l.countMany(ctx, kinds[w], map[string][]string{"q": ks}, time.Now()); err != nil {
					return err
				}
			}
			return nil
		})
	}
	phase([]string{"accepted", "accepted", "accepted", "accepted"})
	if r := ledgerOf(t, ss[0], "q"); r.Accepted != msgs || r.Acked != 0 {
		t.Fatalf("after concurrent first receipts: ledger %+v, want accepted %d, acked 0", r, msgs)
	}
	phase([]string{"acked", "accepted", "acked", "accepted"})
	if r := ledgerOf(t, ss[1], "q"); r.Accepted != msgs || r.Acked != msgs {
		t.Errorf("after concurrent acks and late receipts: ledger %+v, want accepted %d, acked %d", r, msgs, msgs)
	}
	// Folding the per-writer counters changes no total.
	if _, err := New(ss[2]).Prune(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if r := ledgerOf(t, ss[3], "q"); r.Accepted != msgs || r.Acked != msgs {
		t.Errorf("after folding: ledger %+v, want accepted %d, acked %d", r, msgs, msgs)
	}
	if got := eventRows(t, ss[0]); got != msgs {
		t.Errorf("%d ledger rows, want one per message (%d)", got, msgs)
	}
}

// concurrently runs fn(0) … fn(writers-1) at once, each in a goroutine of
// its own, released together, and fails the test with their errors.
func concurrently(t *testing.T, writers int, fn func(w int) error) {
	t.Helper()
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			<-start
			if err := fn(w); err != nil {
				errs <- err
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// shuffledBatches returns 0 … n-1 in a random order, cut into batches of
// at most size: one writer's overlapping batches.
func shuffledBatches(n, size int) [][]int {
	order := rand.Perm(n)
	var out [][]int
	for i := 0; i < n; i += size {
		out = append(out, order[i:min(i+size, n)])
	}
	return out
}
