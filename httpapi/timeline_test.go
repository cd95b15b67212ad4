package httpapi

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/consoletest"
)

// timelineClock fixes the server's clock at consoletest.TimelineNow.
func timelineClock(o *Options) { o.Now = func() time.Time { return consoletest.TimelineNow } }

// at returns the counts of a 24-bucket series from the buckets that are
// not zero.
func at(n int, nonzero map[int]int64) []int64 {
	out := make([]int64, n)
	for i, c := range nonzero {
		out[i] = c
	}
	return out
}

// seriesOf returns the named series of a list.
func seriesOf(t *testing.T, ss []timelineSeries, name string) timelineSeries {
	t.Helper()
	i := slices.IndexFunc(ss, func(s timelineSeries) bool { return s.Name == name })
	if i < 0 {
		t.Fatalf("no series %s in %+v", name, ss)
	}
	return ss[i]
}

// GET /api/timeline counts dead letters, redrives and the ledger's rows
// per bucket in SQL, on both stores: exactly what was seeded in each
// bucket, the span's start in and its end out, per queue and in total.
func TestTimelineCountsPerBucket(t *testing.T) {
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		f := mk(t, allTokens, timelineClock)
		f.SeedTimeline()
		var tl timelineJSON
		if code := f.call("GET", "/api/timeline", &viewerToken, nil, &tl); code != http.StatusOK {
			t.Fatalf("GET /api/timeline: %d %+v", code, tl)
		}
		start := time.Date(2030, 1, 1, 11, 0, 0, 0, time.UTC)
		if tl.Window != "24h" || tl.Bucket != "1h" || tl.BucketSeconds != 3600 || !tl.Start.Equal(start) ||
			!tl.End.Equal(start.Add(24*time.Hour)) || len(tl.Buckets) != 24 || !tl.Buckets[23].Equal(start.Add(23*time.Hour)) {
			t.Fatalf("span: window %s bucket %s (%ds) %s..%s, %d buckets", tl.Window, tl.Bucket, tl.BucketSeconds, tl.Start, tl.End, len(tl.Buckets))
		}
		want := map[string][]int64{
			"dead_lettered":    at(24, map[int]int64{0: 1, 22: 2, 23: 5}),
			"redriven":         at(24, map[int]int64{12: 1, 23: 1}),
			"acked":            at(24, map[int]int64{0: 1, 13: 1, 23: 4}),
			"accepted_unacked": at(24, map[int]int64{23: 2}),
		}
		for name, counts := range want {
			s := seriesOf(t, tl.Series, name)
			var total int64
			for _, c := range counts {
				total += c
			}
			if !slices.Equal(s.Counts, counts) || s.Total != total || s.Source == "" {
				t.Errorf("total %s = %v (total %d, source %q), want %v", name, s.Counts, s.Total, s.Source, counts)
			}
		}
		if len(tl.Queues) != 2 || tl.Queues[0].Queue != "orders.created" || tl.Queues[1].Queue != "payments.captured" {
			t.Fatalf("queues %+v", tl.Queues)
		}
		if got := seriesOf(t, tl.Queues[1].Series, "dead_lettered").Counts; !slices.Equal(got, at(24, map[int]int64{23: 2})) {
			t.Errorf("payments.captured dead_lettered = %v", got)
		}

		// One queue, the last hour in 5-minute buckets: 09:35 to 10:35.
		tl = timelineJSON{}
		if code := f.call("GET", "/api/timeline?queue=orders.created&window=1h", &viewerToken, nil, &tl); code != http.StatusOK {
			t.Fatalf("GET one queue: %d", code)
		}
		if tl.Queue != "orders.created" || tl.Bucket != "5m" || len(tl.Buckets) != 12 || !tl.Start.Equal(time.Date(2030, 1, 2, 9, 35, 0, 0, time.UTC)) {
			t.Fatalf("one queue's span: %+v", tl)
		}
		for name, counts := range map[string][]int64{
			"dead_lettered": at(12, map[int]int64{4: 2, 7: 3}), // 09:59:59.999 and 10:10
			"redriven":      at(12, map[int]int64{6: 1}),       // 10:05, one erased since
			"acked":         at(12, map[int]int64{11: 4}),      // 10:30
		} {
			if got := seriesOf(t, tl.Series, name).Counts; !slices.Equal(got, counts) {
				t.Errorf("orders.created %s over 1h = %v, want %v", name, got, counts)
			}
		}
		if len(tl.Queues) != 1 || !slices.Equal(seriesOf(t, tl.Queues[0].Series, "dead_lettered").Counts, seriesOf(t, tl.Series, "dead_lettered").Counts) {
			t.Errorf("one queue's breakdown %+v", tl.Queues)
		}
	})
}

// Bad parameters are answered 400 naming the parameter, the value and
// what is allowed; the route needs a token as every read route does.
func TestTimelineRefusesBadParameters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, allTokens, timelineClock)
	for _, c := range []struct {
		query, field string
		want         []string
	}{
		{"window=2h", "window", []string{`"2h"`, "1h, 6h, 24h, 7d, 30d"}},
		{"bucket=7m", "bucket", []string{`"7m"`, "1m, 5m, 15m, 1h, 6h, 1d"}},
		{"window=7d&bucket=1m", "bucket", []string{`"1m"`, `"7d"`, "10080 buckets", "2..720", "15m, 1h, 6h"}},
		{"window=1h&bucket=1d", "bucket", []string{`"1d"`, "use one of 1m, 5m, 15m"}},
		{"queue=orders.craeted", "queue", []string{`"orders.craeted"`, "orders.created, payments.captured"}},
	} {
		var e apiError
		if code := f.call("GET", "/api/timeline?"+c.query, &viewerToken, nil, &e); code != http.StatusBadRequest || e.Field != c.field {
			t.Errorf("%s: %d %+v, want 400 naming %s", c.query, code, e, c.field)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(e.Error, w) {
				t.Errorf("%s: error %q lacks %q", c.query, e.Error, w)
			}
		}
	}
	var e apiError
	if code := f.call("GET", "/api/timeline", nil, nil, &e); code != http.StatusUnauthorized {
		t.Errorf("without a token: %d %+v", code, e)
	}
}
