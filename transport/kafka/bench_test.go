package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/sqlitedb"
	"github.com/lily-mq/lily/plan"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"
)

// Partition stall (docs/design.md §10, seed 000 "the same limit on a log"): one
// poison record on a partition fed at a steady rate, under blocking
// retries (sleep in the handler: 1, 2, 4, 8, 16 s scaled down 100×) and
// under Lily's non-blocking retry topics with the same schedule. Measured:
// how long the partition's processing is held by the poison (from its
// first attempt to the start of the next record) and how many records
// arrived behind it meanwhile; beside them, plan.Partition's formula for the
// same schedule, the measured handler time and the measured produce time.
const (
	stallScale   = 100
	stallRate    = 400.0 // records/s on the partition
	stallHandler = time.Millisecond
	stallRun     = 700 * time.Millisecond // how long the producer writes
	stallPoison  = 150 * time.Millisecond // when it writes the poison
)

var stallDelays = []time.Duration{
	time.Second / stallScale, 2 * time.Second / stallScale, 4 * time.Second / stallScale,
	8 * time.Second / stallScale, 16 * time.Second / stallScale,
}

// stallProbe collects the timings of one run.
type stallProbe struct {
	mu           sync.Mutex
	poisonAt     int64 // produce time of the poison, ns
	firstAttempt time.Time
	resumed      time.Time // start of the first record after the poison
	produced     []int64   // produce times of the records after the poison
	handled      int
	handlerTotal time.Duration
	handlerCalls int
}

// handle runs the simulated handler for body and notes the timings; it
// reports whether body is the poison.
func (s *stallProbe) handle(body []byte) bool {
	start := time.Now()
	time.Sleep(stallHandler) // simulates the handler's work
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handlerTotal += time.Since(start)
	s.handlerCalls++
	if string(body) == "poison" {
		if s.firstAttempt.IsZero() {
			s.firstAttempt = start
		}
		return true
	}
	if at, err := strconv.ParseInt(strings.TrimPrefix(string(body), "r:"), 10, 64); err == nil {
		s.handled++
		if s.poisonAt != 0 && at > s.poisonAt && s.resumed.IsZero() {
			s.resumed = start
		}
	}
	return false
}

// produceStream writes stallRate records/s to partition 0 of topic for
// stallRun, the poison at stallPoison; it returns how many ordinary
// records it wrote.
func produceStream(ctx context.Context, cl *kgo.Client, topic string, s *stallProbe) (int, error) {
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	n, sent := 0, false
	var perr atomic.Value
	for now := range tick.C {
		if now.Sub(start) > stallRun {
			break
		}
		want := int(now.Sub(start).Seconds() * stallRate)
		for ; n < want; n++ {
			if !sent && now.Sub(start) >= stallPoison {
				sent = true
				at := time.Now().UnixNano()
				s.mu.Lock()
				s.poisonAt = at
				s.mu.Unlock()
				cl.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte("poison")}, nil)
			}
			at := time.Now().UnixNano()
			s.mu.Lock()
			if s.poisonAt != 0 {
				s.produced = append(s.produced, at)
			}
			s.mu.Unlock()
			cl.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte("r:" + strconv.FormatInt(at, 10))}, func(_ *kgo.Record, err error) {
				if err != nil {
					perr.Store(err)
				}
			})
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return n, err
	}
	if err, _ := perr.Load().(error); err != nil {
		return n, err
	}
	return n, nil
}

// result returns the stall (ms), the records that arrived behind the
// poison while it held the partition (as plan.Partition counts them: rate
// · stall, not the lag the consumer may have had before), and the mean
// handler time.
func (s *stallProbe) result() (stallMs, backlog float64, handler time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	from, to := s.firstAttempt.UnixNano(), s.resumed.UnixNano()
	for _, at := range s.produced {
		if at >= from && at <= to {
			backlog++
		}
	}
	return float64(s.resumed.Sub(s.firstAttempt).Microseconds()) / 1000, backlog, s.handlerTotal / time.Duration(max(s.handlerCalls, 1))
}

// produceTime measures a produce with acks=all, awaited.
func produceTime(b *testing.B, tr *kafka.Transport, topic string) time.Duration {
	const n = 50
	start := time.Now()
	for range n {
		if err := tr.Client().ProduceSync(context.Background(), &kgo.Record{Topic: topic, Value: []byte("probe")}).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start) / n
}

func BenchmarkPartitionStall(b *testing.B) {
	for _, mode := range []string{"blocking", "nonblocking"} {
		b.Run(mode, func(b *testing.B) {
			c := newCluster(b, kfake.NumBrokers(1))
			tr := open(b, c, func(o *kafka.Options) { o.Partitions = 1 })
			ctx := context.Background()
			var sumStall, sumBacklog float64
			var sumHandler, sumProduce time.Duration
			for i := 0; i < b.N; i++ {
				qc := lily.QueueConfig{Name: fmt.Sprintf("stall.%s.%08x", mode, rand.Uint32()), Transport: lily.TransportKafka,
					RetryAttempts: len(stallDelays), RetryBackoffMillis: new(stallDelays[0].Milliseconds()),
					MaxRetryBackoffMillis: new(stallDelays[len(stallDelays)-1].Milliseconds())}.WithDefaults()
				declare(b, tr, qc)
				sumProduce += produceTime(b, tr, kafka.DeadLetterTopic(qc.Name))
				s := &stallProbe{}
				var done func() bool
				var stop func()
				switch mode {
				case "blocking":
					done, stop = blockingConsumer(b, c, tr, qc.Name, s)
				default:
					done, stop = lilyConsumer(b, tr, qc, s)
				}
				n, err := produceStream(ctx, tr.Client(), qc.Name, s)
				if err != nil {
					b.Fatal(err)
				}
				transporttest.WaitFor(b, "the stream to be processed", func() bool {
					s.mu.Lock()
					defer s.mu.Unlock()
					return s.handled >= n && done()
				})
				stop()
				stall, backlog, h := s.result()
				sumStall, sumBacklog, sumHandler = sumStall+stall, sumBacklog+backlog, sumHandler+h
			}
			nf := float64(b.N)
			h, prod := sumHandler/time.Duration(b.N), sumProduce/time.Duration(b.N)
			sched, err := plan.ExplicitDelays(stallDelays)
			if err != nil {
				b.Fatal(err)
			}
			res, err := plan.Partition(plan.PartitionParams{Schedule: sched, HandlerTime: h, ProduceTime: prod,
				PartitionRate: stallRate, PoisonPerDay: 1, Partitions: 1})
			if err != nil {
				b.Fatal(err)
			}
			predicted := res.NonBlocking
			if mode == "blocking" {
				predicted = res.Blocking
			}
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(sumStall/nf, "stall-ms")
			b.ReportMetric(sumBacklog/nf, "backlog-records")
			b.ReportMetric(predicted.StallPerPoisonS*1000, "plan-stall-ms")
			b.ReportMetric(predicted.BacklogRecords, "plan-backlog-records")
			b.ReportMetric(float64(h.Microseconds())/1000, "handler-ms")
			b.ReportMetric(float64(prod.Microseconds())/1000, "produce-ms")
		})
	}
}

// blockingConsumer consumes partition 0 with franz-go alone and retries a
// failing record in the handler, sleeping between attempts (the pattern
// Lily replaces), then dead-letters it with an awaited produce.
func blockingConsumer(b *testing.B, c *kfake.Cluster, tr *kafka.Transport, topic string, s *stallProbe) (done func() bool, stop func()) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}), kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var dead atomic.Bool
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				if !s.handle(r.Value) {
					return
				}
				for _, d := range stallDelays { // attempts 2..6, each after its delay
					time.Sleep(d) // simulates a blocking retry's backoff, the stall measured
					s.handle(r.Value)
				}
				if err := tr.Client().ProduceSync(ctx, &kgo.Record{Topic: kafka.DeadLetterTopic(topic), Value: r.Value}).FirstErr(); err != nil && ctx.Err() == nil {
					b.Error(err)
				}
				dead.Store(true)
			})
		}
	}()
	return dead.Load, func() { cancel(); <-finished; cl.Close() }
}

// lilyConsumer runs Lily's runtime on the transport with one worker, so
// that the partition is processed in order as by the blocking consumer.
func lilyConsumer(b *testing.B, tr *kafka.Transport, qc lily.QueueConfig, s *stallProbe) (done func() bool, stop func()) {
	var dead atomic.Bool
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		if e.Kind == lily.EventDeadLettered {
			dead.Store(true)
		}
	})
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if s.handle(d.Body) {
			return errors.New("poison")
		}
		return nil
	}), lily.ConsumerOptions{Queue: qc, Concurrency: 1, Prefetch: 64, ReceiveWait: 20 * time.Millisecond,
		Hooks: []lily.Hook{hook}, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() { defer close(finished); c.Run(ctx) }()
	return dead.Load, func() { cancel(); <-finished }
}

// BenchmarkConsume measures the happy path — receive, handle, ack, commit
// — through Lily's runtime with the persistent attempt counter (the
// default compacted topic, or SQLite) and without it (counts in memory
// only), on the same in-process cluster. One op is one message.
//
// The rtt=2ms variants delay every produce and offset commit by 2ms in the
// cluster, as a network round trip to a real cluster would: the counter's
// cost is one such round trip per Receive batch, on the path of a delivery
// to its handler. With handlers that do nothing (the default) that round
// trip is fully exposed; the work=1ms variants run 16 handlers that each
// take 1ms: the runtime refills its prefetch window when half of it is
// free, so a round trip in Receive still idles the handlers unless the
// window is larger (prefetch=1024).
func BenchmarkConsume(b *testing.B) {
	const ms = time.Millisecond
	for _, v := range []struct {
		counter   string
		rtt, work time.Duration
		prefetch  int
	}{{"memory", 0, 0, 256}, {"topic", 0, 0, 256}, {"sqlite", 0, 0, 256},
		{"memory", 2 * ms, 0, 256}, {"topic", 2 * ms, 0, 256},
		{"memory", 2 * ms, ms, 256}, {"topic", 2 * ms, ms, 256},
		{"memory", 2 * ms, ms, 1024}, {"topic", 2 * ms, ms, 1024}} {
		name := "counter=" + v.counter
		if v.rtt > 0 {
			name += "/rtt=" + v.rtt.String()
		}
		if v.work > 0 {
			name += "/work=" + v.work.String()
		}
		if v.prefetch != 256 {
			name += "/prefetch=" + strconv.Itoa(v.prefetch)
		}
		counter := v.counter
		b.Run(name, func(b *testing.B) {
			c := newCluster(b, kfake.NumBrokers(1))
			if v.rtt > 0 {
				delayWrites(c, v.rtt)
			}
			mod := func(o *kafka.Options) {}
			switch counter {
			case "memory":
				mod = func(o *kafka.Options) { o.Attempts = kafka.MemoryAttempts() }
			case "sqlite":
				db, err := sqlitedb.Open(context.Background(), filepath.Join(b.TempDir(), "lily.db"), sqlitedb.Options{})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { db.Close() })
				store, err := kafka.SQLAttempts(context.Background(), db)
				if err != nil {
					b.Fatal(err)
				}
				mod = func(o *kafka.Options) { o.Attempts = store }
			}
			tr := open(b, c, mod)
			qc := lily.QueueConfig{Name: fmt.Sprintf("bench.consume.%08x", rand.Uint32()), Transport: lily.TransportKafka}.WithDefaults()
			declare(b, tr, qc)
			publishBench(b, tr, qc.Name)
			ct := &countingTransport{Transport: tr}
			concurrency := 4
			if v.work > 0 {
				concurrency = 16
			}
			runBench(b, ct, qc, lily.HandlerFunc(func(context.Context, *lily.Delivery) error {
				if v.work > 0 {
					time.Sleep(v.work) // simulates the handler's work
				}
				return nil
			}), concurrency, v.prefetch)
			// Each Receive that hands records out saves one snapshot per
			// partition it touched, in one produce.
			b.ReportMetric(float64(ct.saves.Load())/float64(b.N), "saves/msg")
		})
	}
}

// delayWrites makes the cluster answer every produce and offset commit d
// late.
func delayWrites(c *kfake.Cluster, d time.Duration) {
	for _, key := range []kmsg.Key{kmsg.Produce, kmsg.OffsetCommit} {
		c.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			c.SleepControl(func() { time.Sleep(d) }) // simulates a slow broker's write
			return nil, nil, false
		})
	}
}

// countingTransport counts the Receive calls that handed records out.
type countingTransport struct {
	*kafka.Transport
	saves atomic.Int64
}

func (c *countingTransport) Receive(ctx context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	ds, err := c.Transport.Receive(ctx, p)
	if len(ds) > 0 {
		c.saves.Add(1)
	}
	return ds, err
}

// BenchmarkShareConsume is the happy path through a share group: 512-byte
// records consumed by one runtime (Concurrency 4, Prefetch 256) whose
// handler does nothing, on one in-process broker. Every poll is settled
// (ACCEPT, flushed) before the next, so a member's rate is bound by its
// fetch and acknowledgement round trips; the msgs/s metric is the rate.
func BenchmarkShareConsume(b *testing.B) {
	c := newShareCluster(b, kfake.NumBrokers(1))
	tr := open(b, c, shareOptions)
	name := fmt.Sprintf("bench.share.%08x", rand.Uint32())
	qc := lily.QueueConfig{Name: name, Transport: lily.TransportKafka, KafkaShareGroup: "share." + name}.WithDefaults()
	declare(b, tr, qc)
	publishBench(b, tr, qc.Name)
	var calls atomic.Int64
	runBench(b, tr, qc, lily.HandlerFunc(func(context.Context, *lily.Delivery) error {
		calls.Add(1)
		return nil
	}), 4, 256)
	if n := calls.Load(); n != int64(b.N) {
		b.Fatalf("handler calls %d for %d records, want one each", n, b.N)
	}
}

// publishBench publishes b.N records of 512 bytes (keys 0..N-1) to queue,
// 1000 at a time.
func publishBench(b *testing.B, tr transport.Transport, queue string) {
	b.Helper()
	body := make([]byte, 512)
	for start := 0; start < b.N; start += 1000 {
		msgs := make([]lily.Message, min(1000, b.N-start))
		for i := range msgs {
			msgs[i] = lily.Message{Key: strconv.Itoa(start + i), Body: body}
		}
		if err := lily.Publish(context.Background(), tr, queue, msgs); err != nil {
			b.Fatal(err)
		}
	}
}

// runBench runs a consumer of qc with handler on tr until b.N deliveries
// were acked, timing only that, and reports msgs/s.
func runBench(b *testing.B, tr transport.Transport, qc lily.QueueConfig, handler lily.Handler, concurrency, prefetch int) {
	b.Helper()
	var acked atomic.Int64
	all := make(chan struct{}) // closed on the b.N-th ack
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		if e.Kind == lily.EventAcked && acked.Add(1) == int64(b.N) {
			close(all)
		}
	})
	cons, err := lily.NewConsumer(tr, handler, lily.ConsumerOptions{Queue: qc, Concurrency: concurrency, Prefetch: prefetch,
		ReceiveWait: 20 * time.Millisecond, Hooks: []lily.Hook{hook}, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	finished := make(chan struct{})
	b.ResetTimer()
	start := time.Now()
	go func() { defer close(finished); cons.Run(ctx) }()
	<-all
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	<-finished
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
}
