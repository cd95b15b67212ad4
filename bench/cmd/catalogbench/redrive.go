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
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// redriveConfig says what a redrive run measures.
type redriveConfig struct {
	// Dir holds the SQLite files (a temporary directory when empty).
	Dir string
	// N entries are redriven at Rate per second (0: unthrottled) in
	// batches of Batch (0: the catalog's default).
	N     int
	Rate  float64
	Batch int
	// Catalog is a PostgreSQL server URL: the catalog is a fresh schema
	// there, dropped afterwards. Empty: a SQLite catalog.
	Catalog string
	// Transport is "sqlite" or "rabbitmq"; AMQP is the broker's URL.
	Transport string
	AMQP      string
}

// redriveResult is what a redrive achieved.
type redriveResult struct {
	Store     string  `json:"store"`
	Transport string  `json:"transport"`
	Entries   int     `json:"entries"`
	Target    float64 `json:"target_per_s"`
	Batch     int     `json:"batch"`
	Seconds   float64 `json:"seconds"`
	// Overall is entries / seconds, from the call to its return.
	Overall float64 `json:"overall_per_s"`
	// OverallDev is (Overall − Target) / Target (0 when unthrottled).
	OverallDev float64 `json:"overall_deviation"`
	// WindowMin and WindowMax are the lowest and highest rate over the
	// whole five-second windows of the run (a window counts the batches
	// confirmed in it, so its resolution is one batch: a tenth of a
	// second's worth, 2% of a window).
	WindowMin float64 `json:"window_min_per_s"`
	WindowMax float64 `json:"window_max_per_s"`
	Windows   int     `json:"windows"`
	// Arrived is the number of messages that reached the source queue
	// (each event ID once; Doubled counts further copies).
	Arrived  int64 `json:"arrived"`
	Doubled  int64 `json:"doubled"`
	Redriven int   `json:"redriven"`
	// PublishSeconds is the time spent in the transport's Publish
	// (publishing a batch and waiting for its confirms); the rest of
	// Seconds is the catalog's (reading pages, marking batches redriven).
	PublishSeconds float64 `json:"publish_seconds"`
	PeakRSS        int64   `json:"peak_rss_bytes"`
	// Load is /proc/loadavg before and after the run.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
}

// arrivals is what reached the source queue of a redrive.
type arrivals interface {
	// wait waits until n messages arrived (or the arrivals stop) and
	// returns the distinct event IDs and the extra copies.
	wait(ctx context.Context, n int) (distinct, doubled int64, err error)
	close()
}

// redriveBench fills a new catalog with n pending entries of one queue and
// redrives them at the rate through the transport (publish into the
// queue, then mark redriven), checking that every one arrived once.
func redriveBench(ctx context.Context, c redriveConfig) (res redriveResult, err error) {
	res = redriveResult{Entries: c.N, Target: c.Rate, Transport: c.Transport, Batch: c.Batch}
	dir, cleanup, err := workDir(c.Dir)
	if err != nil {
		return res, err
	}
	defer cleanup()
	stamp := time.Now().UnixNano()
	queue := "orders.created"

	var s *catalog.Store
	var pub redrive.Publisher
	var got arrivals
	switch c.Transport {
	case "sqlite":
		path := filepath.Join(dir, fmt.Sprintf("redrive-%d.db", stamp))
		defer removeDB(path)
		tr, err := sqlite.Open(ctx, path, sqlite.Options{})
		if err != nil {
			return res, err
		}
		defer tr.Close()
		if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{{Name: queue}}}); err != nil {
			return res, err
		}
		pub, got = tr, sqliteArrivals{tr: tr, queue: queue}
		if c.Catalog == "" { // the transport's own file: publish and mark in one transaction
			if s, err = catalog.New(ctx, tr.DB()); err != nil {
				return res, err
			}
		}
	case "rabbitmq":
		queue = fmt.Sprintf("catalogbench%08x.orders", rand.Uint32())
		rb, err := openRabbit(ctx, c.AMQP, queue)
		if err != nil {
			return res, err
		}
		defer rb.close()
		pub, got = rb.tr, rb
	default:
		return res, fmt.Errorf("-transport %q: use sqlite or rabbitmq", c.Transport)
	}
	if s == nil {
		where := filepath.Join(dir, fmt.Sprintf("catalog-%d.db", stamp))
		if c.Catalog != "" {
			u, drop, err := freshSchema(ctx, c.Catalog)
			if err != nil {
				return res, err
			}
			defer func() {
				if derr := drop(); derr != nil && err == nil {
					err = derr
				}
			}()
			where = u
		} else {
			defer removeDB(where)
		}
		if s, err = catalog.Open(ctx, where); err != nil {
			return res, err
		}
		defer s.Close()
	}
	res.Store = s.Kind()
	if err := fill(ctx, s, queue, c.N); err != nil {
		return res, err
	}
	type mark struct {
		at   time.Time
		done int
	}
	marks := make([]mark, 0, 4096)
	tp := &timedPublisher{Publisher: pub}
	if _, isTx := pub.(transport.TxPublisher); !isTx {
		pub = tp // a TxPublisher publishes inside the catalog's transaction: not timed apart
	}
	res.LoadBefore = loadAvg()
	start := time.Now()
	out, err := redrive.New(s).Redrive(ctx, redrive.Params{
		Rate:  c.Rate,
		Batch: c.Batch,
		Actor: "bench",
		// The built catalog has delivery_limit entries too: a bulk
		// redrive holds them back unless told (docs/design.md §9).
		IncludeCrashers: true,
		Target:          func(context.Context, string) (redrive.Publisher, error) { return pub, nil },
		Progress: func(p redrive.Progress) {
			marks = append(marks, mark{time.Now(), p.Done})
		},
	})
	elapsed := time.Since(start)
	res.LoadAfter = loadAvg()
	if err != nil {
		return res, err
	}
	res.Redriven = out.Redriven
	res.Seconds = elapsed.Seconds()
	res.PublishSeconds = tp.spent.Seconds()
	res.Overall = float64(out.Redriven) / elapsed.Seconds()
	if c.Rate > 0 {
		res.OverallDev = (res.Overall - c.Rate) / c.Rate
	}
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
	if res.Windows == 0 {
		res.WindowMin = 0
	}
	if res.Arrived, res.Doubled, err = got.wait(ctx, c.N); err != nil {
		return res, err
	}
	if res.Arrived != int64(c.N) || res.Doubled != 0 || out.Redriven != c.N {
		return res, fmt.Errorf("conservation: %d redriven, %d arrived in the queue (%d more copies), want %d once each",
			out.Redriven, res.Arrived, res.Doubled, c.N)
	}
	res.PeakRSS = peakRSS()
	return res, nil
}

// timedPublisher adds up the time spent in Publish.
type timedPublisher struct {
	redrive.Publisher
	spent time.Duration
}

func (t *timedPublisher) Publish(ctx context.Context, p *transport.PublishParams) error {
	start := time.Now()
	err := t.Publisher.Publish(ctx, p)
	t.spent += time.Since(start)
	return err
}

// fill adds n pending entries of queue, 5,000 per transaction.
func fill(ctx context.Context, s *catalog.Store, queue string, n int) error {
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
			return err
		}
	}
	return nil
}

// sqliteArrivals counts what a redrive put into a SQLite transport's
// queue: it is one transaction with the state change, so the queue's depth
// is the count (event IDs are unique per entry there).
type sqliteArrivals struct {
	tr    *sqlite.Transport
	queue string
}

func (a sqliteArrivals) wait(ctx context.Context, _ int) (int64, int64, error) {
	n, err := a.tr.InFlight(ctx, a.queue)
	return n, 0, err
}

func (a sqliteArrivals) close() {}

func printRedrive(w io.Writer, r redriveResult, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(r)
	}
	fmt.Fprintf(w, "| redrive (%s catalog, %s transport) | value |\n|---|---:|\n", r.Store, r.Transport)
	fmt.Fprintf(w, "| entries redriven | %d |\n", r.Redriven)
	fmt.Fprintf(w, "| arrived in the queue (distinct event IDs / extra copies) | %d / %d |\n", r.Arrived, r.Doubled)
	if r.Target > 0 {
		fmt.Fprintf(w, "| --rate | %.0f/s |\n", r.Target)
	} else {
		fmt.Fprintf(w, "| --rate | unthrottled |\n")
	}
	fmt.Fprintf(w, "| duration | %.2f s |\n", r.Seconds)
	if r.Target > 0 {
		fmt.Fprintf(w, "| achieved rate, whole run | %.1f/s (%+.2f%%) |\n", r.Overall, 100*r.OverallDev)
		fmt.Fprintf(w, "| lowest / highest five-second window (%d windows) | %.0f/s (%+.2f%%) / %.0f/s (%+.2f%%) |\n", r.Windows,
			r.WindowMin, 100*(r.WindowMin-r.Target)/r.Target, r.WindowMax, 100*(r.WindowMax-r.Target)/r.Target)
	} else {
		fmt.Fprintf(w, "| achieved rate, whole run | %.1f/s |\n", r.Overall)
		fmt.Fprintf(w, "| lowest / highest five-second window (%d windows) | %.0f/s / %.0f/s |\n", r.Windows, r.WindowMin, r.WindowMax)
	}
	if r.PublishSeconds > 0 {
		fmt.Fprintf(w, "| time in Publish (send + confirms) / in the catalog | %.2f s / %.2f s |\n", r.PublishSeconds, r.Seconds-r.PublishSeconds)
	}
	fmt.Fprintf(w, "| peak RSS | %s |\n", mib(r.PeakRSS))
	fmt.Fprintf(w, "| load average before / after | %s / %s |\n", r.LoadBefore, r.LoadAfter)
	return nil
}
