package nats_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/transporttest"
)

// benchBody is the payload of the benchmarks' messages.
var benchBody = []byte(strings.Repeat("x", 512))

// benchQueue declares a fresh queue (deleted when the benchmark ends) and
// preloads it with n messages through Lily's publisher.
func benchQueue(b *testing.B, tr *nats.Transport, n int) lily.QueueConfig {
	b.Helper()
	ctx := context.Background()
	qc := lily.QueueConfig{Name: fmt.Sprintf("bench.%08x", rand.Uint32()), Transport: "nats", Breaker: new(bool)}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.DeleteQueue(context.Background(), qc.Spec()) })
	for i := 0; i < n; i += 1000 {
		msgs := make([]lily.Message, min(1000, n-i))
		for j := range msgs {
			msgs[j] = lily.Message{Body: benchBody}
		}
		if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
			b.Fatal(err)
		}
	}
	return qc
}

// plainLoop is what a Go engineer writes with jetstream alone: fetch 256,
// handle each (forward, when set), acknowledge each, until n are done.
func plainLoop(b *testing.B, tr *nats.Transport, qc lily.QueueConfig, n int, forward func([]jetstream.Msg) error) {
	b.Helper()
	ctx := context.Background()
	bd := tr.QueueBinding(qc.Name)
	c, err := tr.JetStream().Consumer(ctx, bd.Stream, bd.Consumer)
	if err != nil {
		b.Fatal(err)
	}
	for done := 0; done < n; {
		batch, err := c.Fetch(256, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		var ms []jetstream.Msg
		for m := range batch.Messages() {
			ms = append(ms, m)
		}
		if forward != nil {
			if err := forward(ms); err != nil {
				b.Fatal(err)
			}
		}
		for _, m := range ms {
			if err := m.Ack(); err != nil {
				b.Fatal(err)
			}
		}
		done += len(ms)
	}
	if err := tr.Conn().Flush(); err != nil {
		b.Fatal(err)
	}
}

// lilyRun consumes with the runtime until done holds.
func lilyRun(b *testing.B, tr *nats.Transport, qc lily.QueueConfig, h lily.Handler, done func() bool) {
	b.Helper()
	c, err := lily.NewConsumer(tr, h, lily.ConsumerOptions{Queue: qc, Concurrency: 4, Prefetch: 256, ReceiveWait: 100 * time.Millisecond,
		Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	go func() {
		transporttest.Poll(ctx, func() (bool, string) { return done(), "" })
		cancel()
	}()
	if err := c.Run(ctx); err != nil {
		b.Fatal(err)
	}
	if !done() {
		b.Fatal("gave up waiting for the consumer")
	}
}

// wantEmpty fails the benchmark unless the queue holds nothing and its
// dead-letter stream holds dead letters.
func wantEmpty(b *testing.B, tr *nats.Transport, queue string, dead int) {
	b.Helper()
	ctx := context.Background()
	if n, err := tr.InFlight(ctx, queue); err != nil || n != 0 {
		b.Fatalf("conservation: %d in flight (%v), want 0", n, err)
	}
	if n, err := tr.DeadLetterDepth(ctx, queue); err != nil || n != int64(dead) {
		b.Fatalf("conservation: %d dead letters (%v), want %d", n, err, dead)
	}
}

// BenchmarkHappyPath: plain jetstream loops — Fetch 256 and ack each, and
// Consume with an ack in the callback — against the Lily consumer acking
// every message (one op = one message of 512 bytes).
func BenchmarkHappyPath(b *testing.B) {
	if os.Getenv("LILY_NATS_BENCH") == "" {
		b.Skip("SKIPPING: set LILY_NATS_BENCH=1 to run against the NATS server")
	}
	tr := open(b, func(o *nats.Options) { o.AckWait = 30 * time.Second })
	b.Run("plain-fetch", func(b *testing.B) {
		qc := benchQueue(b, tr, b.N)
		b.ResetTimer()
		plainLoop(b, tr, qc, b.N, nil)
		b.StopTimer()
		wantEmpty(b, tr, qc.Name, 0)
	})
	b.Run("plain-consume", func(b *testing.B) {
		qc := benchQueue(b, tr, b.N)
		bd := tr.QueueBinding(qc.Name)
		c, err := tr.JetStream().Consumer(context.Background(), bd.Stream, bd.Consumer)
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan struct{})
		var n int
		b.ResetTimer()
		cc, err := c.Consume(func(m jetstream.Msg) {
			if err := m.Ack(); err != nil {
				b.Error(err)
			}
			if n++; n == b.N {
				close(done)
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		<-done
		cc.Stop()
		if err := tr.Conn().Flush(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		transporttest.WaitForState(b, "the acks to reach the consumer", func() (bool, string) {
			n, err := tr.InFlight(context.Background(), qc.Name)
			return err == nil && n == 0, fmt.Sprintf("%d in flight (%v)", n, err)
		})
		wantEmpty(b, tr, qc.Name, 0)
	})
	b.Run("lily", func(b *testing.B) {
		qc := benchQueue(b, tr, b.N)
		b.ResetTimer()
		lilyRun(b, tr, qc, lily.HandlerFunc(func(context.Context, *lily.Delivery) error { return nil }), func() bool {
			n, err := tr.InFlight(context.Background(), qc.Name)
			return err == nil && n == 0
		})
		b.StopTimer()
		wantEmpty(b, tr, qc.Name, 0)
	})
}

// BenchmarkDeadLetter: a plain forwarder — fetch 256, publish each copy
// with the same evidence headers as Lily's to the dead-letter stream, wait
// for every PubAck, acknowledge — against the Lily consumer whose handler
// returns lily.Permanent (copy confirmed, then AckTerm).
func BenchmarkDeadLetter(b *testing.B) {
	if os.Getenv("LILY_NATS_BENCH") == "" {
		b.Skip("SKIPPING: set LILY_NATS_BENCH=1 to run against the NATS server")
	}
	tr := open(b, func(o *nats.Options) { o.AckWait = 30 * time.Second })
	b.Run("plain-forwarder", func(b *testing.B) {
		qc := benchQueue(b, tr, b.N)
		rec := evidence.Record{Reason: evidence.ReasonPermanent, ErrorType: "*errors.errorString", ErrorMessage: "permanent: bad order",
			Source: "nats/" + qc.Name, Consumer: "bench", Host: "bench-host", DeliveryCount: 1, DeadLetteredAt: time.Now()}
		js := tr.JetStream()
		b.ResetTimer()
		plainLoop(b, tr, qc, b.N, func(ms []jetstream.Msg) error {
			fs := make([]jetstream.PubAckFuture, len(ms))
			for i, m := range ms {
				h := map[string]any{}
				rec.Apply(h)
				out := natsgo.NewMsg(nats.DeadLetterSubject(qc.Name))
				for k, v := range m.Headers() {
					out.Header[k] = v
				}
				for k, v := range h {
					out.Header.Set(k, fmt.Sprint(v))
				}
				out.Data = m.Data()
				f, err := js.PublishMsgAsync(out)
				if err != nil {
					return err
				}
				fs[i] = f
			}
			for _, f := range fs {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					return err
				}
			}
			return nil
		})
		b.StopTimer()
		wantEmpty(b, tr, qc.Name, b.N)
	})
	b.Run("lily", func(b *testing.B) {
		qc := benchQueue(b, tr, b.N)
		b.ResetTimer()
		lilyRun(b, tr, qc, lily.HandlerFunc(func(context.Context, *lily.Delivery) error {
			return lily.Permanent(errors.New("bad order"))
		}), func() bool {
			n, err := tr.DeadLetterDepth(context.Background(), qc.Name)
			return err == nil && n == int64(b.N)
		})
		b.StopTimer()
		wantEmpty(b, tr, qc.Name, b.N)
	})
}

// BenchmarkDrain: DrainDeadLetters of N dead letters (published straight
// to the dead-letter subject with evidence headers) into a store that
// keeps nothing: the reads, and the removal after each batch's store.
func BenchmarkDrain(b *testing.B) {
	if os.Getenv("LILY_NATS_BENCH") == "" {
		b.Skip("SKIPPING: set LILY_NATS_BENCH=1 to run against the NATS server")
	}
	tr := open(b, func(o *nats.Options) { o.AckWait = 30 * time.Second })
	qc := benchQueue(b, tr, 0)
	js := tr.JetStream()
	rec := evidence.Record{Reason: evidence.ReasonPermanent, ErrorType: "*errors.errorString", ErrorMessage: "permanent: bad order",
		Source: "nats/" + qc.Name, Consumer: "bench", Host: "bench-host", DeliveryCount: 1, DeadLetteredAt: time.Now()}
	h := map[string]any{}
	rec.Apply(h)
	var fs []jetstream.PubAckFuture
	for range b.N {
		m := natsgo.NewMsg(nats.DeadLetterSubject(qc.Name))
		for k, v := range h {
			m.Header.Set(k, fmt.Sprint(v))
		}
		m.Data = benchBody
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			b.Fatal(err)
		}
		fs = append(fs, f)
	}
	for _, f := range fs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
	stored := 0
	b.ResetTimer()
	n, err := tr.DrainDeadLetters(context.Background(), &transport.DrainParams{Queue: qc.Name}, func(_ context.Context, ds []*transport.Delivery) error {
		stored += len(ds)
		return nil
	})
	b.StopTimer()
	if err != nil || n != b.N || stored != b.N {
		b.Fatalf("conservation: drained %d, stored %d (%v), want %d", n, stored, err, b.N)
	}
	wantEmpty(b, tr, qc.Name, 0)
}

// BenchmarkRetryRound: the Lily consumer on N messages that each fail once
// (retried after 1 ms: a retry record, then NakWithDelay) and succeed on
// their redelivery (the record read, the ack, the record deleted).
func BenchmarkRetryRound(b *testing.B) {
	if os.Getenv("LILY_NATS_BENCH") == "" {
		b.Skip("SKIPPING: set LILY_NATS_BENCH=1 to run against the NATS server")
	}
	tr := open(b, func(o *nats.Options) { o.AckWait = 30 * time.Second })
	qc := benchQueue(b, tr, b.N)
	qc.RetryAttempts, qc.RetryBackoffMillis, qc.MaxRetryBackoffMillis = 1, new(int64(1)), new(int64(1))
	var failed, acked atomic.Int64
	b.ResetTimer()
	lilyRun(b, tr, qc, lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		if d.Headers["x-retry-count"] == nil {
			failed.Add(1)
			return errors.New("inventory service timed out")
		}
		acked.Add(1)
		return nil
	}), func() bool {
		n, err := tr.InFlight(context.Background(), qc.Name)
		return err == nil && n == 0 && acked.Load() >= int64(b.N)
	})
	b.StopTimer()
	if failed.Load() != int64(b.N) || acked.Load() != int64(b.N) {
		b.Fatalf("conservation: %d failed, %d acked, want %d each", failed.Load(), acked.Load(), b.N)
	}
	wantEmpty(b, tr, qc.Name, 0)
}
