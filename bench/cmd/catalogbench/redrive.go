package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// redriveResult is what a rate-limited redrive achieved.
type redriveResult struct {
	Entries int     `json:"entries"`
	Target  float64 `json:"target_per_s"`
	Seconds float64 `json:"seconds"`
	// Overall is entries / seconds, from the call to its return.
	Overall float64 `json:"overall_per_s"`
	// OverallDev is (Overall − Target) / Target.
	OverallDev float64 `json:"overall_deviation"`
	// WindowMin and WindowMax are the lowest and highest rate over the
	// whole five-second windows of the run (a window counts the batches
	// confirmed in it, so its resolution is one batch: a tenth of a
	// second's worth, 2% of a window).
	WindowMin float64 `json:"window_min_per_s"`
	WindowMax float64 `json:"window_max_per_s"`
	Windows   int     `json:"windows"`
	// InQueue is the number of messages in the source queue afterwards.
	InQueue  int64 `json:"in_queue"`
	Redriven int   `json:"redriven"`
	PeakRSS  int64 `json:"peak_rss_bytes"`
}

// redrive fills a new SQLite store with n pending entries of one queue and
// redrives them at rate through the SQLite transport (publish into the
// queue, then mark redriven), checking that every one arrived.
func redrive(ctx context.Context, dir string, n int, rate float64) (redriveResult, error) {
	res := redriveResult{Entries: n, Target: rate}
	dir, cleanup, err := workDir(dir)
	if err != nil {
		return res, err
	}
	defer cleanup()
	path := filepath.Join(dir, fmt.Sprintf("redrive-%d.db", time.Now().UnixNano()))
	defer removeDB(path)
	tr, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		return res, err
	}
	defer tr.Close()
	const queue = "orders.created"
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{{Name: queue}}}); err != nil {
		return res, err
	}
	s, err := catalog.New(ctx, tr.DB())
	if err != nil {
		return res, err
	}
	r := rand.New(rand.NewPCG(3, 4))
	body := make([]byte, 512)
	now := time.Now()
	for done := 0; done < n; {
		batch := make([]*catalog.Entry, 0, 5000)
		for len(batch) < cap(batch) && done < n {
			e := syntheticEntry(r, done, now, body)
			e.Queue = queue
			batch = append(batch, e)
			done++
		}
		if err := s.Insert(ctx, batch...); err != nil {
			return res, err
		}
	}
	type mark struct {
		at   time.Time
		done int
	}
	marks := make([]mark, 0, 4096)
	start := time.Now()
	out, err := s.Redrive(ctx, catalog.RedriveParams{
		Rate:   rate,
		Actor:  "bench",
		Target: func(context.Context, string) (catalog.Publisher, error) { return tr, nil },
		Progress: func(p catalog.RedriveProgress) {
			marks = append(marks, mark{time.Now(), p.Done})
		},
	})
	elapsed := time.Since(start)
	if err != nil {
		return res, err
	}
	res.Redriven = out.Redriven
	res.Seconds = elapsed.Seconds()
	res.Overall = float64(out.Redriven) / elapsed.Seconds()
	res.OverallDev = (res.Overall - rate) / rate
	if len(marks) == 0 {
		return res, fmt.Errorf("no progress reported")
	}
	res.WindowMin, res.WindowMax = math.Inf(1), 0
	// Whole five-second windows: entries confirmed between start+5(k−1) s
	// and start+5k s (marks are per batch).
	const window = 5 * time.Second
	prev := 0
	for k := 1; ; k++ {
		edge := start.Add(time.Duration(k) * window)
		if edge.After(marks[len(marks)-1].at) {
			break
		}
		doneAt := prev
		for _, m := range marks {
			if m.at.After(edge) {
				break
			}
			doneAt = m.done
		}
		w := float64(doneAt-prev) / window.Seconds()
		res.WindowMin, res.WindowMax = math.Min(res.WindowMin, w), math.Max(res.WindowMax, w)
		res.Windows++
		prev = doneAt
	}
	if res.InQueue, err = tr.InFlight(ctx, queue); err != nil {
		return res, err
	}
	if res.InQueue != int64(n) || out.Redriven != n {
		return res, fmt.Errorf("conservation: %d redriven, %d in the queue, want %d", out.Redriven, res.InQueue, n)
	}
	res.PeakRSS = peakRSS()
	return res, nil
}

func printRedrive(w io.Writer, r redriveResult, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(r)
	}
	fmt.Fprintf(w, "| redrive (SQLite transport) | value |\n|---|---:|\n")
	fmt.Fprintf(w, "| entries redriven (all arrived in the queue) | %d |\n", r.Redriven)
	fmt.Fprintf(w, "| --rate | %.0f/s |\n", r.Target)
	fmt.Fprintf(w, "| duration | %.2f s |\n", r.Seconds)
	fmt.Fprintf(w, "| achieved rate, whole run | %.1f/s (%+.2f%%) |\n", r.Overall, 100*r.OverallDev)
	fmt.Fprintf(w, "| lowest / highest five-second window (%d windows) | %.0f/s (%+.2f%%) / %.0f/s (%+.2f%%) |\n", r.Windows,
		r.WindowMin, 100*(r.WindowMin-r.Target)/r.Target, r.WindowMax, 100*(r.WindowMax-r.Target)/r.Target)
	fmt.Fprintf(w, "| peak RSS | %s |\n", mib(r.PeakRSS))
	return nil
}
