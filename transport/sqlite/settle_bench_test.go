package sqlite

import (
	"context"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/lily-mq/lily/transport"
)

// BenchmarkSettleAcks measures one Settle of a batch of acks (the
// runtime's common settlement), per ack: publishing and leasing the batch
// is outside the timer. The commit (WAL, synchronous FULL) is inside it,
// so ns/ack is mostly the disk's; cpu-ns/ack is the process's CPU time
// during the Settle calls (getrusage: coarse, summed over many calls).
func BenchmarkSettleAcks(b *testing.B) {
	for _, batch := range []int{16, 256} {
		b.Run(strconv.Itoa(batch), func(b *testing.B) {
			ctx := context.Background()
			tr, err := Open(ctx, filepath.Join(b.TempDir(), "lily.db"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{{Name: "q"}}}); err != nil {
				b.Fatal(err)
			}
			msgs := make([]transport.Message, batch)
			body := make([]byte, 512)
			ss := make([]transport.Settlement, batch)
			n := 0
			var cpu time.Duration
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				for i := range msgs {
					n++
					msgs[i] = transport.Message{EventID: strconv.Itoa(n), Body: body}
				}
				if err := tr.Publish(ctx, &transport.PublishParams{Queue: "q", Messages: msgs}); err != nil {
					b.Fatal(err)
				}
				ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: "q", Max: batch, Consumer: "c"})
				if err != nil || len(ds) != batch {
					b.Fatalf("received %d of %d: %v", len(ds), batch, err)
				}
				for i, d := range ds {
					ss[i] = transport.Settlement{Delivery: d, Action: transport.Ack}
				}
				b.StartTimer()
				before := cpuTime(b)
				if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime(b) - before
			}
			// Conservation: every message published was acked.
			if n, err := tr.InFlight(ctx, "q"); err != nil || n != 0 {
				b.Fatalf("in flight after the run: %d (%v), want 0", n, err)
			}
			if r := ledgerOf(b, tr)["q"]; !r.Balanced() || r.Accepted != int64(n) || r.Acked != int64(n) {
				b.Fatalf("ledger %+v, want %d accepted and acked, balanced", r, n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/ack")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*batch), "cpu-ns/ack")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
