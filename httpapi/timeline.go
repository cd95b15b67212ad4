package httpapi

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
)

// GET /api/timeline: the console's charts over time (docs/console.md).
// Every series is counted in SQL from what the catalog keeps, per queue
// and bucket; timelineSources says where each comes from.

// timelineWindow is a span the charts offer, with the bucket it is cut
// into by default.
type timelineWindow struct {
	name   string
	d      time.Duration
	bucket string
}

var (
	timelineWindows = []timelineWindow{
		{"1h", time.Hour, "5m"}, {"6h", 6 * time.Hour, "15m"}, {"24h", 24 * time.Hour, "1h"},
		{"7d", 7 * 24 * time.Hour, "6h"}, {"30d", 30 * 24 * time.Hour, "1d"},
	}
	timelineBuckets = map[string]time.Duration{
		"1m": time.Minute, "5m": 5 * time.Minute, "15m": 15 * time.Minute, "1h": time.Hour, "6h": 6 * time.Hour, "1d": 24 * time.Hour,
	}
	timelineBucketNames = []string{"1m", "5m", "15m", "1h", "6h", "1d"}
)

// maxTimelineBuckets bounds the buckets of one answer: a chart has no use
// for more bars than it has pixels.
const maxTimelineBuckets = 720

// The series of a timeline, in the order they are answered, and where
// each is counted from (the answer says so too: "source").
var timelineSources = []struct{ name, source string }{
	{"dead_lettered", "catalog entries: lily_dlq_entries.dead_lettered_at, every dead letter of every transport"},
	{"redriven", "catalog entries in state redriven: lily_dlq_entries.decided_at, the redrive (an entry erased since is left out; the audit log keeps its redrive)"},
	{"acked", "ledger rows of kind acked: lily_ledger_events.at, the ack (broker transports; rows older than the ledger horizon are pruned)"},
	{"accepted_unacked", "ledger rows of kind accepted: lily_ledger_events.at, the acceptance of messages not acked yet (broker transports; the ledger keeps no acceptance time once a message is acked, so accepted per bucket is acked + accepted_unacked only where acks come within a bucket)"},
}

// timelineSeries is one series of counts, a count per bucket.
type timelineSeries struct {
	Name   string  `json:"name"`
	Source string  `json:"source"`
	Total  int64   `json:"total"`
	Counts []int64 `json:"counts"`
}

// timelineQueue is the series of one queue.
type timelineQueue struct {
	Queue  string           `json:"queue"`
	Series []timelineSeries `json:"series"`
}

// timelineJSON is the answer of GET /api/timeline.
type timelineJSON struct {
	// Queue is the queue asked for; empty: every queue, summed in Series.
	Queue  string `json:"queue"`
	Window string `json:"window"`
	Bucket string `json:"bucket"`
	// BucketSeconds is the width of a bucket; Buckets the start of each,
	// oldest first. Buckets are aligned on multiples of their width since
	// the Unix epoch (UTC): the last one holds now and ends at End.
	BucketSeconds int64            `json:"bucket_seconds"`
	Start         time.Time        `json:"start"`
	End           time.Time        `json:"end"`
	Buckets       []time.Time      `json:"buckets"`
	Series        []timelineSeries `json:"series"`
	// Queues breaks Series down by queue: every queue with a count in the
	// window, or the queue asked for.
	Queues []timelineQueue `json:"queues"`
}

// timelineSpan reads window and bucket into the span of buckets ending
// with the one that holds now.
func timelineSpan(window, bucket string, now time.Time) (catalog.Span, string, string, error) {
	if window == "" {
		window = "24h"
	}
	i := slices.IndexFunc(timelineWindows, func(w timelineWindow) bool { return w.name == window })
	if i < 0 {
		names := make([]string, len(timelineWindows))
		for j, w := range timelineWindows {
			names[j] = w.name
		}
		return catalog.Span{}, "", "", badField("window", "window %q: must be one of %s", window, strings.Join(names, ", "))
	}
	w := timelineWindows[i]
	if bucket == "" {
		bucket = w.bucket
	}
	width, ok := timelineBuckets[bucket]
	if !ok {
		return catalog.Span{}, "", "", badField("bucket", "bucket %q: must be one of %s", bucket, strings.Join(timelineBucketNames, ", "))
	}
	var fit []string // the buckets that suit this window
	for _, b := range timelineBucketNames {
		if d := timelineBuckets[b]; d < w.d && w.d/d <= maxTimelineBuckets {
			fit = append(fit, b)
		}
	}
	n := int(w.d / width)
	if !slices.Contains(fit, bucket) {
		return catalog.Span{}, "", "", badField("bucket", "bucket %q with window %q makes %d buckets: want 2..%d; with window %s use one of %s",
			bucket, window, n, maxTimelineBuckets, window, strings.Join(fit, ", "))
	}
	ms := width.Milliseconds()
	end := time.UnixMilli((now.UnixMilli()/ms + 1) * ms).UTC()
	return catalog.Span{Start: end.Add(-w.d), Width: width, N: n}, window, bucket, nil
}

// handleTimeline answers the counts over time of ?queue= (empty: every
// queue) in the ?window= cut into ?bucket=.
func (s *Server) handleTimeline(w http.ResponseWriter, r *http.Request, _ *principal) {
	q := r.URL.Query()
	sp, window, bucket, err := timelineSpan(q.Get("window"), q.Get("bucket"), s.o.Now())
	if err == nil {
		err = s.knownQueue(r, q.Get("queue"))
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	queue := q.Get("queue")
	entries, err := s.o.Store.Timeline(r.Context(), queue, sp)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	events, err := ledger.New(s.o.Store).Timeline(r.Context(), queue, sp)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	byName := []map[string][]int64{entries.DeadLettered, entries.Redriven, events.Acked, events.Unacked}
	out := timelineJSON{Queue: queue, Window: window, Bucket: bucket, BucketSeconds: int64(sp.Width / time.Second),
		Start: sp.Start, End: sp.End(), Buckets: make([]time.Time, sp.N), Queues: []timelineQueue{}}
	for i := range sp.N {
		out.Buckets[i] = sp.Start.Add(time.Duration(i) * sp.Width)
	}
	var queues []string
	for _, m := range byName {
		for qn := range m {
			if !slices.Contains(queues, qn) {
				queues = append(queues, qn)
			}
		}
	}
	if queue != "" {
		queues = []string{queue}
	}
	slices.Sort(queues)
	for _, qn := range queues {
		out.Queues = append(out.Queues, timelineQueue{Queue: qn})
	}
	for k, src := range timelineSources {
		sum := timelineSeries{Name: src.name, Source: src.source, Counts: make([]int64, sp.N)}
		for j, qn := range queues {
			one := timelineSeries{Name: src.name, Source: src.source, Counts: make([]int64, sp.N)}
			for i, c := range byName[k][qn] {
				one.Counts[i], one.Total = c, one.Total+c
				sum.Counts[i], sum.Total = sum.Counts[i]+c, sum.Total+c
			}
			out.Queues[j].Series = append(out.Queues[j].Series, one)
		}
		out.Series = append(out.Series, sum)
	}
	writeJSON(w, http.StatusOK, out)
}

// knownQueue refuses a queue that neither the catalog nor the
// configuration knows: a typo would chart zeros.
func (s *Server) knownQueue(r *http.Request, queue string) error {
	if queue == "" {
		return nil
	}
	names, err := s.o.Store.QueueNames(r.Context())
	if err != nil {
		return err
	}
	for _, c := range s.o.Config.Queues {
		if !slices.Contains(names, c.Name) {
			names = append(names, c.Name)
		}
	}
	if slices.Contains(names, queue) {
		return nil
	}
	slices.Sort(names)
	return badField("queue", "queue %q: not in the catalog or the configuration; known queues: %s (or leave queue empty for every queue)",
		queue, strings.Join(names, ", "))
}
