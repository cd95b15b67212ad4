package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// The synthetic dead letters: a few queues, reasons, error types, versions
// and error messages whose numbers and quoted values vary, so that every
// grouping column has realistic cardinality.
var (
	benchQueues   = []string{"orders.created", "payments.captured", "invoices.issued", "stock.reserved"}
	benchReasons  = []evidence.Reason{evidence.ReasonPermanent, evidence.ReasonRetriesExhausted, evidence.ReasonDeliveryLimit, evidence.ReasonInvalidRetryCount, evidence.ReasonExpired}
	benchTypes    = []string{"*json.SyntaxError", "*net.OpError", "*url.Error", "*lily.TimeoutError", "*pq.Error", "*errors.errorString"}
	benchVersions = []string{"1.4.0", "1.4.1", "1.4.2", "1.5.0", "2.0.0-rc1"}
	benchMessages = []string{
		"invalid character 'x' looking for beginning of value at offset %d",
		"dial tcp 10.0.%d.7:5432: connection refused",
		`inventory service: 503 Service Unavailable for sku "SKU-%04d"`,
		"order o-%06d not found",
		"payment gateway: timeout after %ds",
		`duplicate key value violates unique constraint "orders_pkey" (id=%d)`,
		"context deadline exceeded after %dms",
		"customer c-%05d has no billing address",
	}
)

// build fills a new catalog with n pending entries, 10,000 per
// transaction: the SQLite file at where (which must not exist), or the
// PostgreSQL catalog at where (a postgres:// URL whose search_path names an
// empty schema). On PostgreSQL it ends with VACUUM (ANALYZE), the state
// autovacuum leaves a bulk-loaded table in.
func build(ctx context.Context, where string, n int, stderr io.Writer) error {
	if where == "" {
		return fmt.Errorf("-db or -catalog is required")
	}
	pg := catalog.IsPostgresURL(where)
	if _, err := os.Stat(where); err == nil && !pg {
		return fmt.Errorf("-db %s exists: build makes a new catalog", where)
	}
	s, err := catalog.Open(ctx, where)
	if err != nil {
		return err
	}
	defer s.Close()
	r := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	now := time.Now()
	// A 512-byte JSON object (so that --where can read it); each entry's
	// order_id is written over the start (syntheticEntry).
	head, tail := `{"order_id":"o-0000001","sku":"SKU-0001","qty":1,"note":"`, `"}`
	body := []byte(head + strings.Repeat("x", 512-len(head)-len(tail)) + tail)
	for done := 0; done < n; {
		batch := make([]*catalog.Entry, 0, 10000)
		for len(batch) < cap(batch) && done < n {
			batch = append(batch, syntheticEntry(r, done, now, body))
			done++
		}
		if err := insertBatch(ctx, s, batch); err != nil {
			return err
		}
		if done%100000 == 0 {
			fmt.Fprintf(stderr, "  %d entries (%.0f/s)\n", done, float64(done)/time.Since(start).Seconds())
		}
	}
	if pg {
		took, err := vacuum(ctx, s)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "  VACUUM (ANALYZE) took %.1f s\n", took.Seconds())
	}
	return nil
}

// insertBatch adds entries in one transaction: on SQLite with the
// Inserter the transports use, on PostgreSQL with Store.Insert.
func insertBatch(ctx context.Context, s *catalog.Store, batch []*catalog.Entry) error {
	if s.Kind() == "postgres" {
		return s.Insert(ctx, batch...)
	}
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	in, err := catalogdb.NewInserter(ctx, tx)
	if err != nil {
		return err
	}
	defer in.Close()
	for _, e := range batch {
		if err := in.Insert(ctx, e); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func syntheticEntry(r *rand.Rand, i int, now time.Time, body []byte) *catalog.Entry {
	reason := benchReasons[r.IntN(len(benchReasons))]
	msg := fmt.Sprintf(benchMessages[r.IntN(len(benchMessages))], r.IntN(100000))
	at := now.Add(-time.Duration(r.Int64N(int64(10 * 24 * time.Hour))))
	h := transport.Headers{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "source-system": "shop-web"}
	q := benchQueues[r.IntN(len(benchQueues))]
	evidence.Record{
		Reason: reason, ErrorType: benchTypes[r.IntN(len(benchTypes))], ErrorMessage: msg,
		Source: "sqlite/" + q, DeliveryCount: 1 + r.IntN(5), RetryCount: r.IntN(4),
		FirstFailureAt: at.Add(-time.Minute), LastFailureAt: at, DeadLetteredAt: at,
		Consumer: "orders-consumer", ConsumerVersion: benchVersions[r.IntN(len(benchVersions))], Host: "worker-3",
	}.Apply(h)
	b := append([]byte(nil), body...)
	copy(b, fmt.Sprintf(`{"order_id":"o-%07d"`, i))
	sum := sha256.Sum256(b)
	m := transport.Message{EventID: fmt.Sprintf("evt-%08d", i), Key: fmt.Sprintf("c-%05d", r.IntN(50000)), Type: "order.created", Body: b}
	e := catalog.NewEntry(q, m, h, string(reason), at)
	e.BodySHA256 = hex.EncodeToString(sum[:])
	return e
}

// timing is one measured operation.
type timing struct {
	Op     string  `json:"op"`
	Millis float64 `json:"ms"`
	Rows   int64   `json:"rows"`
}

// opsResult is what ops measured on one catalog.
type opsResult struct {
	Store        string   `json:"store"`
	Entries      int64    `json:"entries"`
	Timings      []timing `json:"timings"`
	PeakRSS      int64    `json:"peak_rss_bytes"`
	PeakHeap     int64    `json:"peak_heap_bytes"`
	DatabaseSize int64    `json:"db_bytes"`
}

// ops times the operator's commands on the catalog at where (a SQLite
// file or a postgres:// URL), as 'lily dlq' runs them (the held entries,
// every grouping column, the per-queue list, peek, a streamed pass over
// every entry with its body, a dry-run redrive).
func ops(ctx context.Context, where string) (opsResult, error) {
	var res opsResult
	s, err := catalog.Open(ctx, where)
	if err != nil {
		return res, err
	}
	defer s.Close()
	res.Store = s.Kind()
	res.DatabaseSize = catalogSize(ctx, s, where)
	heap := sampleHeap()
	held := catalog.Filter{States: catalog.HeldStates}
	measure := func(op string, fn func() (int64, error)) error {
		start := time.Now()
		n, err := fn()
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		res.Timings = append(res.Timings, timing{Op: op, Millis: float64(time.Since(start).Microseconds()) / 1000, Rows: n})
		return nil
	}
	if err := measure("count", func() (int64, error) {
		m, err := s.CountBy(ctx, "state", catalog.Filter{})
		res.Entries = m["pending"]
		return int64(len(m)), err
	}); err != nil {
		return res, err
	}
	for _, col := range []string{"reason", "error_type", "fingerprint", "consumer_version", "source"} {
		if err := measure("group --by "+col, func() (int64, error) {
			g, err := s.Group(ctx, col, held)
			return int64(len(g)), err
		}); err != nil {
			return res, err
		}
	}
	if err := measure("list", func() (int64, error) {
		st, err := s.Stats(ctx, time.Now(), nil)
		return int64(len(st)), err
	}); err != nil {
		return res, err
	}
	// 'lily dlq peek' per queue (the first page of each held state) and
	// with a filter that most entries fail (a rare consumer version).
	if err := measure("peek --queue Q (List 10)", func() (int64, error) {
		es, err := s.List(ctx, catalog.Filter{Queue: benchQueues[0], States: catalog.HeldStates}, 10)
		return int64(len(es)), err
	}); err != nil {
		return res, err
	}
	if err := measure("peek --reason R --error-type T (List 10)", func() (int64, error) {
		es, err := s.List(ctx, catalog.Filter{States: catalog.HeldStates, Reason: string(benchReasons[3]), ErrorType: benchTypes[5]}, 10)
		return int64(len(es)), err
	}); err != nil {
		return res, err
	}
	if err := measure("stream every entry (Each)", func() (int64, error) {
		var n int64
		err := s.Each(ctx, catalog.Filter{}, func(e *catalog.Entry) error { n++; return nil })
		return n, err
	}); err != nil {
		return res, err
	}
	if err := measure("redrive --dry-run (all pending)", func() (int64, error) {
		r, err := redrive.New(s).Redrive(ctx, redrive.Params{DryRun: true, Actor: "bench", Batch: 1000})
		return int64(r.Selected), err
	}); err != nil {
		return res, err
	}
	res.PeakHeap = heap.Stop()
	res.PeakRSS = peakRSS()
	return res, nil
}

func printOps(w io.Writer, rs []opsResult, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(rs)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprint(tw, "| operation |")
	for _, r := range rs {
		fmt.Fprintf(tw, " %s, %d entries |", r.Store, r.Entries)
	}
	fmt.Fprint(tw, "\n|---|")
	for range rs {
		fmt.Fprint(tw, "---:|")
	}
	fmt.Fprintln(tw)
	if len(rs) > 0 {
		for i, t := range rs[0].Timings {
			fmt.Fprintf(tw, "| %s |", t.Op)
			for _, r := range rs {
				if i < len(r.Timings) {
					fmt.Fprintf(tw, " %.0f ms |", r.Timings[i].Millis)
				}
			}
			fmt.Fprintln(tw)
		}
	}
	fmt.Fprint(tw, "| peak RSS (process) |")
	for _, r := range rs {
		fmt.Fprintf(tw, " %s |", mib(r.PeakRSS))
	}
	fmt.Fprint(tw, "\n| peak Go heap in use |")
	for _, r := range rs {
		fmt.Fprintf(tw, " %s |", mib(r.PeakHeap))
	}
	fmt.Fprint(tw, "\n| catalog size on disk |")
	for _, r := range rs {
		fmt.Fprintf(tw, " %s |", mib(r.DatabaseSize))
	}
	fmt.Fprintln(tw)
	return tw.Flush()
}
