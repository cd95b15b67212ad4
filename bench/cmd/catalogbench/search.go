package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/catalog/where"
)

// searchResult is what the search mode measured on one catalog.
type searchResult struct {
	Store    string   `json:"store"`
	Entries  int64    `json:"entries"`
	Timings  []timing `json:"timings"`
	PeakRSS  int64    `json:"peak_rss_bytes"`
	PeakHeap int64    `json:"peak_heap_bytes"`
	// IndexSize is the bytes of the search index (PostgreSQL: table, GIN
	// index and TOAST; SQLite: the FTS5 shadow tables' pages).
	IndexSize int64 `json:"index_bytes"`
}

// searchOps times 'lily dlq search' (the first page of 50 hits, as the
// CLI and the console ask for it) on a catalog that build filled: a word
// of one body, a phrase of about an eighth of the error messages, a word
// of every body, a prefix, a search narrowed by queue and state, a word
// no entry has, and all the hits of the phrase streamed; then --where on
// a body field (not indexed: a scan of the held entries).
func searchOps(ctx context.Context, at string) (searchResult, error) {
	var res searchResult
	s, err := catalog.Open(ctx, at)
	if err != nil {
		return res, err
	}
	defer s.Close()
	res.Store = s.Kind()
	if s.Kind() == "postgres" {
		// The state autovacuum leaves the index in after a bulk load.
		if _, err := s.DB().ExecContext(ctx, `VACUUM (ANALYZE) lily_dlq_search`); err != nil {
			return res, err
		}
	}
	res.IndexSize = searchIndexSize(ctx, s)
	m, err := s.CountBy(ctx, "state", catalog.Filter{})
	if err != nil {
		return res, err
	}
	for _, n := range m {
		res.Entries += n
	}
	heap := sampleHeap()
	held := catalog.Filter{States: catalog.HeldStates}
	search := func(op, text string, f catalog.Filter, limit int) error {
		start := time.Now()
		var n int64
		err := s.Search(ctx, catalog.SearchParams{Text: text, Filter: f, Limit: limit}, func(*catalog.SearchHit) error { n++; return nil })
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		res.Timings = append(res.Timings, timing{Op: op, Millis: float64(time.Since(start).Microseconds()) / 1000, Rows: n})
		return nil
	}
	mid := fmt.Sprintf("o-%07d", res.Entries/2) // one body's order_id
	for _, q := range []struct {
		op, text string
		f        catalog.Filter
		limit    int
	}{
		{"search " + mid + " (one body)", mid, held, 50},
		{`search "payment gateway" timeout (1/8 of messages)`, `"payment gateway" timeout`, held, 50},
		{"search sku (every body)", "sku", held, 50},
		{"search refus* (prefix)", "refus*", held, 50},
		{"search timeout --queue payments.captured --state pending", "timeout", catalog.Filter{Queue: "payments.captured", States: []catalog.State{catalog.StatePending}}, 50},
		{"search zzznomatch (no hit)", "zzznomatch", held, 50},
		{`search "payment gateway" timeout, every hit streamed`, `"payment gateway" timeout`, held, 1 << 30},
	} {
		if err := search(q.op, q.text, q.f, q.limit); err != nil {
			return res, err
		}
	}
	w, err := where.Parse(fmt.Sprintf(`.order_id == %q`, mid))
	if err != nil {
		return res, err
	}
	start := time.Now()
	es, err := s.List(ctx, catalog.Filter{States: catalog.HeldStates, Where: w}, 10)
	if err != nil {
		return res, fmt.Errorf("where: %w", err)
	}
	res.Timings = append(res.Timings, timing{Op: "peek --where '.order_id == \"" + mid + "\"' (a scan, not indexed)",
		Millis: float64(time.Since(start).Microseconds()) / 1000, Rows: int64(len(es))})
	res.PeakHeap = heap.Stop()
	res.PeakRSS = peakRSS()
	return res, nil
}

// searchIndexSize is the size of the search index.
func searchIndexSize(ctx context.Context, s *catalog.Store) int64 {
	var n int64
	if s.Kind() == "postgres" {
		s.DB().QueryRowContext(ctx, `SELECT pg_total_relation_size('lily_dlq_search')`).Scan(&n)
		return n
	}
	s.DB().QueryRowContext(ctx, `SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name LIKE 'lily_dlq_search%'`).Scan(&n)
	return n
}

func printSearch(w io.Writer, r searchResult, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(r)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "| operation (%s, %d entries) | time | hits |\n|---|---:|---:|\n", r.Store, r.Entries)
	for _, t := range r.Timings {
		fmt.Fprintf(tw, "| %s | %.0f ms | %d |\n", t.Op, t.Millis, t.Rows)
	}
	fmt.Fprintf(tw, "| peak RSS (process) | %s | |\n| peak Go heap in use | %s | |\n| search index size | %s | |\n",
		mib(r.PeakRSS), mib(r.PeakHeap), mib(r.IndexSize))
	return tw.Flush()
}
