package bench

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// The catalog benchmarks; the full-scale figures (1,000,000 entries, a
// 100,000-entry redrive at a rate, peak memory by size) come from
// cmd/catalogbench. Run them with
//
//	go test -run '^$' -bench Catalog -bench.catalog-entries 100000
var benchCatalogEntries = flag.Int("bench.catalog-entries", 20000, "entries in the catalog of BenchmarkCatalogGroup")

// fillCatalog adds n pending entries of queue q with a few reasons, error
// types and error messages.
func fillCatalog(b *testing.B, s *catalog.Store, q string, n int) {
	b.Helper()
	ctx := context.Background()
	reasons := []evidence.Reason{evidence.ReasonPermanent, evidence.ReasonRetriesExhausted, evidence.ReasonDeliveryLimit}
	body := make([]byte, 512)
	now := time.Now()
	for done := 0; done < n; {
		batch := make([]*catalog.Entry, 0, 5000)
		for ; len(batch) < cap(batch) && done < n; done++ {
			h := transport.Headers{"app": "bench"}
			evidence.Record{Reason: reasons[done%len(reasons)], ErrorType: fmt.Sprintf("*pkg.Error%d", done%7),
				ErrorMessage: fmt.Sprintf("order %d not found after %dms", done, done%1000), ConsumerVersion: fmt.Sprintf("1.%d", done%4),
				DeadLetteredAt: now}.Apply(h)
			m := transport.Message{EventID: fmt.Sprintf("evt-%09d", done), Key: "k", Body: body}
			batch = append(batch, catalog.NewEntry(q, m, h, "", now.Add(-time.Duration(done)*time.Second)))
		}
		if err := s.Insert(ctx, batch...); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCatalogGroup groups the held entries by each column; one op is
// one 'lily dlq group' over -bench.catalog-entries entries.
func BenchmarkCatalogGroup(b *testing.B) {
	ctx := context.Background()
	s, err := catalog.Open(ctx, filepath.Join(b.TempDir(), "catalog.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	fillCatalog(b, s, "orders", *benchCatalogEntries)
	for _, col := range []string{"reason", "error_type", "fingerprint", "consumer_version", "source"} {
		b.Run(col, func(b *testing.B) {
			for b.Loop() {
				g, err := s.Group(ctx, col, catalog.Filter{States: catalog.HeldStates})
				if err != nil || len(g) == 0 {
					b.Fatalf("Group: %v (%d groups)", err, len(g))
				}
			}
			b.ReportMetric(float64(*benchCatalogEntries)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// BenchmarkCatalogRedrive redrives b.N entries through the SQLite
// transport as fast as it confirms (no --rate): publish into the source
// queue, then mark redriven with the audit record. Use -benchtime Nx.
func BenchmarkCatalogRedrive(b *testing.B) {
	ctx := context.Background()
	tr, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "lily.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{{Name: "orders"}}}); err != nil {
		b.Fatal(err)
	}
	s, err := catalog.New(ctx, tr.DB())
	if err != nil {
		b.Fatal(err)
	}
	fillCatalog(b, s, "orders", b.N)
	b.ResetTimer()
	res, err := redrive.New(s).Redrive(ctx, redrive.Params{Actor: "bench",
		Target: func(context.Context, string) (redrive.Publisher, error) { return tr, nil }})
	if err != nil || res.Redriven != b.N {
		b.Fatalf("Redrive = %+v, %v", res, err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}
