package bench

import (
	"context"
	"flag"
	"testing"
	"time"
)

// Each benchmark runs b.N messages through publish + consume + ack on a
// fresh database: ns/op is per message, msgs/s is reported as a metric.
// Fix N with -benchtime, e.g.
//
//	go test -run '^$' -bench . -benchtime 100000x
//
// (a time-based -benchtime makes the framework grow b.N by trial runs,
// which works but spends most of its time on small runs).
var (
	benchConcurrency = flag.Int("bench.concurrency", 4, "consumer parallelism")
	benchPublish     = flag.Int("bench.publish-batch", 100, "messages per publish call / transaction")
	benchBatch       = flag.Int("bench.batch", 100, "raw Lily receive/settle batch and bare-SQL transaction size")
	benchPrefetch    = flag.Int("bench.prefetch", 1024, "Lily consumer prefetch")
	benchSettle      = flag.Int("bench.settle-batch", 512, "Lily consumer settle batch")
	benchBody        = flag.Int("bench.body", 512, "body size in bytes")
)

func benchConfig(b *testing.B) Config {
	return Config{
		N:            b.N,
		BodySize:     *benchBody,
		PublishBatch: *benchPublish,
		Batch:        *benchBatch,
		Concurrency:  *benchConcurrency,
		Prefetch:     *benchPrefetch,
		SettleBatch:  *benchSettle,
		Dir:          b.TempDir(),
		Timeout:      30 * time.Minute,
	}
}

func runBench(b *testing.B, run func(context.Context, Config) (Result, error)) {
	c := benchConfig(b)
	b.ReportAllocs()
	b.ResetTimer()
	res, err := run(context.Background(), c)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	// The measured interval excludes database creation and message
	// preparation; report it rather than the framework's timer.
	b.ReportMetric(float64(res.Elapsed.Nanoseconds())/float64(res.N), "ns/msg")
	b.ReportMetric(res.PerSecond(), "msgs/s")
}

func BenchmarkLilyRuntime(b *testing.B) { runBench(b, RunLilyRuntime) }
func BenchmarkLilyRaw(b *testing.B)     { runBench(b, RunLilyRaw) }
func BenchmarkGoqite(b *testing.B)      { runBench(b, RunGoqite) }
func BenchmarkGoqiteJobs(b *testing.B)  { runBench(b, RunGoqiteJobs) }
func BenchmarkBareSQL(b *testing.B)     { runBench(b, RunBareSQL) }

// TestConservation runs every system on a small N: each must end with all
// messages consumed exactly once, acked, and the queue empty.
func TestConservation(t *testing.T) {
	for _, r := range Runners() {
		t.Run(r.Name, func(t *testing.T) {
			t.Parallel()
			n := 2000
			if r.Name == "goqite" || r.Name == "goqite-jobs" {
				n = 300
			}
			res, err := r.Run(t.Context(), Config{N: n, PublishBatch: 64, Batch: 50, Dir: t.TempDir(), Timeout: 2 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if res.N != n || res.Elapsed <= 0 {
				t.Fatalf("result %+v", res)
			}
		})
	}
}
