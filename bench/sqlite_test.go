package bench

import (
	"context"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/transport"
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
	benchHeaders     = flag.Bool("bench.headers", false, "four typical string headers on every Lily message")
	benchConsumers   = flag.Int("bench.consumers", 4, "competing Lily consumers (BenchmarkLilyCompeting)")
	benchRiver       = flag.Int("bench.river-workers", 4, "River client's MaxWorkers")
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
		Headers:      *benchHeaders,
		Consumers:    *benchConsumers,
		RiverWorkers: *benchRiver,
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
func BenchmarkRiver(b *testing.B)       { runBench(b, RunRiver) }

// BenchmarkLilyCompeting runs -bench.consumers (4) competing Lily
// consumers on one transport and one queue.
func BenchmarkLilyCompeting(b *testing.B) { runBench(b, RunLilyCompeting) }

// BenchmarkGoqiteBatched is goqite beyond its documented patterns: leases
// and deletes batched through its *Tx methods.
func BenchmarkGoqiteBatched(b *testing.B) { runBench(b, RunGoqiteBatched) }
func BenchmarkBareSQL(b *testing.B)       { runBench(b, RunBareSQL) }

// BenchmarkBareSQLSplit is an experiment: the ceiling loop with the lease
// state in a narrow table apart from the bodies.
func BenchmarkBareSQLSplit(b *testing.B) { runBench(b, RunBareSQLSplit) }

// BenchmarkLilyShapes is an experiment: the raw loop on Lily's schema with
// other statement shapes (see RunLilyShapes).
func BenchmarkLilyShapes(b *testing.B) { runBench(b, RunLilyShapes) }

// BenchmarkHeaderCodec measures the typed-JSON header codec the SQLite
// transport applies to every message with headers: MarshalHeaders on
// publish, UnmarshalHeaders on lease (four typical string headers).
func BenchmarkHeaderCodec(b *testing.B) {
	h := sampleHeaders(7)
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := transport.MarshalHeaders(h); err != nil {
				b.Fatal(err)
			}
		}
	})
	data, err := transport.MarshalHeaders(h)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		b.ReportMetric(float64(len(data)), "bytes")
		for b.Loop() {
			if _, err := transport.UnmarshalHeaders(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestConservation runs every system on a small N: each must end with all
// messages consumed exactly once, acked, and the queue empty.
func TestConservation(t *testing.T) {
	for _, r := range append(Runners(), Experiments()...) {
		t.Run(r.Name, func(t *testing.T) {
			t.Parallel()
			n := 2000
			if r.Name == "goqite" || r.Name == "goqite-jobs" || r.Name == "goqite-batched" || r.Name == "river" {
				n = 300
			}
			res, err := r.Run(t.Context(), Config{N: n, PublishBatch: 64, Batch: 50, Dir: t.TempDir(), Timeout: 2 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if res.N != n || res.Elapsed <= 0 {
				t.Fatalf("result %+v", res)
			}
			if strings.HasPrefix(r.Name, "lily-competing") && (res.Handled != int64(n) || res.Duplicates != 0) {
				t.Fatalf("competing consumers: %d handler calls for %d messages, %d duplicates; want %d and 0", res.Handled, n, res.Duplicates, n)
			}
		})
	}
	for _, r := range []Runner{{"lily-runtime", RunLilyRuntime}, {"lily-raw", RunLilyRaw}} {
		t.Run(r.Name+"-headers", func(t *testing.T) {
			t.Parallel()
			if _, err := r.Run(t.Context(), Config{N: 1000, PublishBatch: 64, Batch: 50, Headers: true, Dir: t.TempDir(), Timeout: 2 * time.Minute}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
