package catalog_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogtest"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/transport"
)

// deadLetters returns n broker dead letters m0..m<n-1> of queue orders.
func deadLetters(n int) []*transport.Delivery {
	ds := make([]*transport.Delivery, n)
	for i := range ds {
		ds[i] = catalogtest.Delivery("orders", fmt.Sprint("m", i), fmt.Sprintf(`{"n":%d}`, i))
	}
	return ds
}

// TestPostgresIngestTakesNoFleetLock: an ingest batch under its lease is
// stored while another process holds an entry's row in a decision's
// transaction. Before issue 29 the batch took the catalog's lock
// exclusively and waited.
func TestPostgresIngestTakesNoFleetLock(t *testing.T) {
	ss := pgFleet(t, 2)
	ctx := context.Background()
	insertPending(t, ss[0], 1)
	catalogtest.HoldEntry(t, ss[0], "e0")
	holder := catalog.LeaseHolder()
	if ok, err := ss[1].TakeLease(ctx, "ingest/orders", holder, time.Minute, time.Now()); err != nil || !ok {
		t.Fatalf("TakeLease = %v, %v", ok, err)
	}
	d := &catalogtest.Drainer{Waiting: deadLetters(3), Batch: 2}
	var n int
	err := pgtest.Finishes(t, "an ingest", func() (err error) {
		n, err = ss[1].IngestWith(ctx, d, catalog.IngestParams{Queue: "orders", Lease: "ingest/orders", Holder: holder, TTL: time.Minute})
		return err
	})
	if err != nil || n != 3 {
		t.Fatalf("ingested %d, %v; want 3", n, err)
	}
}

// TestPostgresIngestsExact: four processes ingest the same 40 broker dead
// letters at once (as after a hand-off whose ack was lost): each is one
// entry.
func TestPostgresIngestsExact(t *testing.T) {
	const procs, n = 4, 40
	ss := pgFleet(t, procs)
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() {
			if _, err := s.Ingest(ctx, &catalogtest.Drainer{Waiting: deadLetters(n), Batch: 3}, "orders"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if entries, distinct := catalogtest.Entries(t, ss[0], "orders"); entries != n || distinct != n {
		t.Errorf("%d entries (%d distinct), want %d", entries, distinct, n)
	}
}
