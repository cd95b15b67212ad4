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

// build fills a new catalog with n pending entries, 10,000 per transaction.
func build(ctx context.Context, path string, n int, stderr io.Writer) error {
	if path == "" {
		return fmt.Errorf("-db is required")
	}
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("-db %s exists: build makes a new catalog", path)
	}
	s, err := catalog.Open(ctx, path)
	if err != nil {
		return err
	}
	defer s.Close()
	r := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	now := time.Now()
	body := []byte(strings.Repeat(`{"order_id":"o-000001","sku":"SKU-0001","qty":1},`, 11)[:512])
	for done := 0; done < n; {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		in, err := catalog.NewInserter(ctx, tx)
		if err != nil {
			tx.Rollback()
			return err
		}
		for i := 0; i < 10000 && done < n; i++ {
			e := syntheticEntry(r, done, now, body)
			if err := in.Insert(ctx, e); err != nil {
				in.Close()
				tx.Rollback()
				return err
			}
			done++
		}
		in.Close()
		if err := tx.Commit(); err != nil {
			return err
		}
		if done%100000 == 0 {
			fmt.Fprintf(stderr, "  %d entries (%.0f/s)\n", done, float64(done)/time.Since(start).Seconds())
		}
	}
	return nil
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
	Entries      int64    `json:"entries"`
	Timings      []timing `json:"timings"`
	PeakRSS      int64    `json:"peak_rss_bytes"`
	PeakHeap     int64    `json:"peak_heap_bytes"`
	DatabaseSize int64    `json:"db_bytes"`
}

// ops times the operator's commands on the catalog at path, as 'lily dlq'
// runs them (the held entries, every grouping column, the per-queue list,
// a streamed pass over every entry with its body, a dry-run redrive).
func ops(ctx context.Context, path string) (opsResult, error) {
	var res opsResult
	s, err := catalog.Open(ctx, path)
	if err != nil {
		return res, err
	}
	defer s.Close()
	if fi, err := os.Stat(path); err == nil {
		res.DatabaseSize = fi.Size()
	}
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
	if err := measure("stream every entry (Each)", func() (int64, error) {
		var n int64
		err := s.Each(ctx, catalog.Filter{}, func(e *catalog.Entry) error { n++; return nil })
		return n, err
	}); err != nil {
		return res, err
	}
	if err := measure("redrive --dry-run (all pending)", func() (int64, error) {
		r, err := s.Redrive(ctx, catalog.RedriveParams{DryRun: true, Actor: "bench", Batch: 1000})
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
		fmt.Fprintf(tw, " %d entries |", r.Entries)
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
	fmt.Fprint(tw, "\n| database file |")
	for _, r := range rs {
		fmt.Fprintf(tw, " %s |", mib(r.DatabaseSize))
	}
	fmt.Fprintln(tw)
	return tw.Flush()
}
