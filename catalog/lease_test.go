package catalog

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/pgtest"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

func TestLeaseTakeRenewRelease(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		const name, ttl = "ingest/orders", 10 * time.Second
		a, b := LeaseHolder(), LeaseHolder()
		if a == b || !strings.Contains(a, "/") {
			t.Fatalf("holders %q %q: want distinct host/pid/random names", a, b)
		}
		take := func(who string, at time.Time) bool {
			t.Helper()
			ok, err := s.TakeLease(ctx, name, who, ttl, at)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		renew := func(who string, at time.Time) bool {
			t.Helper()
			ok, err := s.RenewLease(ctx, name, who, ttl, at)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		if !take(a, testNow) {
			t.Fatal("a could not take a free lease")
		}
		if take(b, testNow.Add(time.Second)) {
			t.Fatal("b took a lease a holds")
		}
		if !take(a, testNow.Add(2*time.Second)) || !renew(a, testNow.Add(5*time.Second)) {
			t.Fatal("a could not renew its own lease")
		}
		if renew(b, testNow.Add(6*time.Second)) {
			t.Fatal("b renewed a lease it does not hold")
		}
		// a stops renewing (it died): its lease runs out at 5s+ttl.
		if take(b, testNow.Add(5*time.Second+ttl-time.Millisecond)) {
			t.Fatal("b took the lease before it expired")
		}
		if !take(b, testNow.Add(5*time.Second+ttl)) {
			t.Fatal("b could not take the expired lease")
		}
		if renew(a, testNow.Add(5*time.Second+ttl)) {
			t.Fatal("a renewed a lease b took over")
		}
		if ok, err := s.ReleaseLease(ctx, name, a); ok || err != nil { // not a's: nothing happens
			t.Fatal(ok, err)
		}
		ls, err := s.Leases(ctx, "ingest/")
		if err != nil || len(ls) != 1 || ls[0].Holder != b || !ls[0].Expires.Equal(testNow.Add(5*time.Second+2*ttl)) {
			t.Fatalf("leases %+v %v: want b's, expiring at 5s+2*ttl", ls, err)
		}
		if ok, err := s.ReleaseLease(ctx, name, b); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if renew(b, testNow.Add(16*time.Second)) {
			t.Fatal("b renewed a released lease")
		}
		if !take(a, testNow.Add(16*time.Second)) {
			t.Fatal("a could not take the released lease at once")
		}
		if ls, _ := s.Leases(ctx, "other/"); len(ls) != 0 {
			t.Errorf("prefix other/: %+v", ls)
		}
		for _, c := range []struct {
			name, holder string
			ttl          time.Duration
			want         string
		}{{"", a, ttl, "empty name"}, {name, "", ttl, "empty holder"}, {name, a, 0, "ttl 0s"}} {
			if _, err := s.TakeLease(ctx, c.name, c.holder, c.ttl, testNow); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("TakeLease(%q, %q, %s) = %v, want %q", c.name, c.holder, c.ttl, err, c.want)
			}
		}
	})
}

// TestLeaseOneHolderAcrossStores races holders on two handles of one
// catalog file (as two processes would): at every instant exactly one
// holds the lease.
func TestLeaseOneHolderAcrossStores(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { leaseOneHolder(t, filepath.Join(t.TempDir(), "catalog.db")) })
	t.Run("postgres", func(t *testing.T) { leaseOneHolder(t, pgtest.URL(t)) })
}

// leaseOneHolder races holders over two handles on the catalog at path.
func leaseOneHolder(t *testing.T, path string) {
	ctx := context.Background()
	var stores []*Store
	for range 2 {
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	const rounds, holders = 20, 6
	for round := range rounds {
		at := testNow.Add(time.Duration(round) * time.Minute) // the previous round's lease expired
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for h := range holders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := stores[h%2].TakeLease(ctx, "ingest/q", LeaseHolder(), 30*time.Second, at)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					won++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if won != 1 {
			t.Fatalf("round %d: %d holders took the lease, want exactly 1", round, won)
		}
	}
}

// fakeDrainer hands out its dead letters in batches and removes a batch
// only when store accepts it.
type fakeDrainer struct {
	waiting []*transport.Delivery
	batch   int
}

func (f *fakeDrainer) DrainDeadLetters(ctx context.Context, p *transport.DrainParams, store func(context.Context, []*transport.Delivery) error) (int, error) {
	total := 0
	for len(f.waiting) > 0 {
		n := min(f.batch, len(f.waiting))
		if err := store(ctx, f.waiting[:n]); err != nil {
			return total, err
		}
		f.waiting = f.waiting[n:]
		total += n
	}
	return total, nil
}

func TestIngestFencedByLease(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *Store) {
		var dls []*transport.Delivery
		for i, id := range []string{"a", "b", "c"} {
			d := delivery("orders", id, `{"n":`+string(rune('0'+i))+`}`)
			if id == "c" { // made by Lily: it carries evidence
				d.Headers = evidenceHeaders(evidence.ReasonPermanent, "E", "bad", "v1", 1, 0, 0)
			}
			dls = append(dls, d)
		}
		now := func() time.Time { return testNow }
		const lease, ttl = "ingest/orders", time.Minute
		me, other := LeaseHolder(), LeaseHolder()
		if ok, err := s.TakeLease(ctx, lease, other, ttl, testNow); !ok || err != nil {
			t.Fatal(ok, err)
		}
		f := &fakeDrainer{waiting: append([]*transport.Delivery(nil), dls...), batch: 2}
		p := IngestParams{Queue: "orders", Lease: lease, Holder: me, TTL: ttl, Now: now}
		n, err := s.IngestWith(ctx, f, p)
		if !errors.Is(err, ErrLeaseLost) || n != 0 || len(f.waiting) != 3 {
			t.Fatalf("ingest without the lease: n=%d err=%v waiting=%d; want ErrLeaseLost, nothing drained", n, err, len(f.waiting))
		}
		if c := countEntries(t, s, "orders"); c != 0 {
			t.Fatalf("%d entries stored without the lease", c)
		}
		if ok, err := s.ReleaseLease(ctx, lease, other); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if ok, err := s.TakeLease(ctx, lease, me, ttl, testNow); !ok || err != nil {
			t.Fatal(ok, err)
		}
		var added, broker int
		p.OnEntry = func(e *Entry, isNew, brokerMade bool) {
			if isNew {
				added++
			}
			if brokerMade {
				broker++
			}
		}
		if n, err := s.IngestWith(ctx, f, p); n != 3 || err != nil {
			t.Fatalf("ingest with the lease: %d, %v", n, err)
		}
		if c := countEntries(t, s, "orders"); c != 3 || added != 3 || broker != 2 {
			t.Errorf("entries %d, added %d, broker-made %d; want 3, 3, 2", c, added, broker)
		}
		// The same dead letters again (a crash before the broker ack): no
		// entry is added.
		f.waiting = dls
		added, broker = 0, 0
		if n, err := s.IngestWith(ctx, f, p); n != 3 || err != nil || added != 0 {
			t.Fatalf("re-ingest: %d, %v, added %d", n, err, added)
		}
		if c := countEntries(t, s, "orders"); c != 3 {
			t.Errorf("re-ingest doubled entries: %d", c)
		}
		ls, _ := s.Leases(ctx, lease)
		if len(ls) != 1 || !ls[0].Expires.Equal(testNow.Add(ttl)) {
			t.Errorf("the ingest did not renew the lease: %+v", ls)
		}
	})
}

func countEntries(t *testing.T, s *Store, queue string) int {
	t.Helper()
	var n int
	if err := s.db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM lily_dlq_entries WHERE queue = ?`, queue).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
