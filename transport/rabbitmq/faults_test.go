package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// cutProxy forwards TCP connections to the broker and can cut them all at
// once, as a network failure would, without touching the broker.
type cutProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, b)
			p.mu.Unlock()
			go func() { io.Copy(b, c); b.Close() }()
			go func() { io.Copy(c, b); c.Close() }()
		}
	}()
	return p
}

// cut closes every proxied connection and returns how many pairs it cut.
func (p *cutProxy) cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	n := len(p.conns) / 2
	p.conns = nil
	return n
}

// proxiedURL points an AMQP URL at the proxy.
func (p *cutProxy) proxiedURL(t *testing.T, amqpURL string) string {
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

// TestConnectionLossDuringHandOffs closes the broker connections again and
// again while a consumer acks, retries and dead-letters: every message must
// end acked or dead-lettered as its kind demands (duplicates allowed, loss
// not).
func TestConnectionLossDuringHandOffs(t *testing.T) {
	ctx := context.Background()
	direct := open(t) // for setup and inspection, not cut
	defer direct.Close()
	u, _ := url.Parse(brokerURL())
	proxy := newCutProxy(t, u.Host)
	tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: proxy.proxiedURL(t, brokerURL()), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	qc := randomQueue("faults.conn", lily.QueueConfig{RetryAttempts: 1, RetryBackoffMillis: new(int64(50)), DeliveryLimit: new(20), Breaker: new(bool)})
	declared(t, tr, qc)
	direct.Register(qc.Spec())
	const n = 300
	msgs := make([]lily.Message, n)
	for i := range msgs {
		msgs[i].Body = []byte(fmt.Sprintf("m-%d", i))
	}
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	kind := map[string]int{}
	for i, m := range msgs {
		kind[m.EventID] = i % 3 // 0 ok, 1 permanent, 2 fails once then ok
	}
	var mu sync.Mutex
	acked := map[string]bool{}
	var settleFailures atomic.Int64
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch e.Kind {
		case lily.EventAcked:
			acked[e.EventID] = true
		case lily.EventSettleFailed:
			settleFailures.Add(1)
		}
	})
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		time.Sleep(5 * time.Millisecond) // simulates the handler's work
		switch kind[d.EventID] {
		case 1:
			return lily.Permanent(errors.New("bad"))
		case 2:
			if d.RetryCount == 0 {
				return errors.New("blip")
			}
		}
		return nil
	}), lily.ConsumerOptions{Queue: qc, Concurrency: 4, Prefetch: 20, ReceiveWait: 20 * time.Millisecond,
		Hooks: []lily.Hook{hook}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	deadLettered := func() map[string]bool {
		ds, err := direct.Peek(ctx, &rabbitmq.PeekParams{Queue: rabbitmq.DeadLetterQueue(qc.Name)})
		if err != nil {
			return nil
		}
		out := map[string]bool{}
		for _, d := range ds {
			out[d.EventID] = true
		}
		return out
	}
	finished := func() (bool, string) {
		dl := deadLettered()
		mu.Lock()
		defer mu.Unlock()
		open := 0
		for id := range kind {
			if !acked[id] && !dl[id] {
				open++
			}
		}
		return open == 0, fmt.Sprintf("%d of %d neither acked nor dead-lettered, %d settle failures", open, len(kind), settleFailures.Load())
	}
	// The outage: up to six connection cuts at random moments, while the
	// consumer works.
	var kills atomic.Int64
	stopCuts, cutsDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(cutsDone)
		for kills.Load() < 6 {
			kills.Add(int64(proxy.cut()))
			select {
			case <-stopCuts:
				return
			case <-time.After(time.Duration(50+rand.IntN(100)) * time.Millisecond): // simulates connection failures at random moments
			}
		}
	}()
	transporttest.WaitWithin(t, 90*time.Second, "every message acked or dead-lettered", finished)
	close(stopCuts)
	<-cutsDone
	cancel()
	<-done
	if kills.Load() == 0 {
		t.Fatal("no connection was closed: the test did not exercise anything")
	}
	dl := deadLettered()
	for id, k := range kind {
		switch {
		case k == 1 && !dl[id]:
			t.Errorf("permanent message %s not in the dead-letter queue", id)
		case k != 1 && dl[id]:
			t.Errorf("healthy message %s dead-lettered", id)
		case k != 1 && !acked[id]:
			t.Errorf("message %s never acked", id)
		}
	}
	for id := range dl {
		if _, ok := kind[id]; !ok {
			t.Errorf("dead letter %s was never published", id)
		}
	}
	if n, err := direct.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("%d messages still in flight (%v)", n, err)
	}
	t.Logf("cut %d connections; %d settlements failed and were redelivered", kills.Load(), settleFailures.Load())
}

// TestUnroutableHandOffKeepsOriginal removes the dead-letter queue's binding:
// the dead-letter copy is returned as unroutable, so the original must not
// be acked; once the binding is back, it is dead-lettered.
func TestUnroutableHandOffKeepsOriginal(t *testing.T) {
	ctx := context.Background()
	qc := randomQueue("faults.unroutable", lily.QueueConfig{})
	tr := openDeclared(t, qc)
	spec := qc.Spec()
	_, ch := rawChannel(t)
	dlx, dlq := rabbitmq.DeadLetterExchange(spec.Exchange), rabbitmq.DeadLetterQueue(spec.Name)
	if err := ch.QueueUnbind(dlq, spec.Name, dlx, nil); err != nil {
		t.Fatal(err)
	}
	msgs := []lily.Message{{Body: []byte("bad data")}}
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	var failures atomic.Int64
	var unroutable, dead atomic.Bool
	var rebound sync.Once
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		switch e.Kind {
		case lily.EventDeadLettered:
			dead.Store(true)
		case lily.EventSettleFailed:
			failures.Add(1)
			if errors.Is(e.Err, rabbitmq.ErrUnroutable) {
				unroutable.Store(true)
			}
			// The original is still held: in flight, not in the DLQ.
			if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 1 {
				t.Errorf("after the returned hand-off: %d in flight (%v), want the original", n, err)
			}
			if failures.Load() >= 2 {
				rebound.Do(func() {
					if err := ch.QueueBind(dlq, spec.Name, dlx, false, nil); err != nil {
						t.Error(err)
					}
				})
			}
		}
	})
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		return lily.Permanent(errors.New("bad data"))
	}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 20 * time.Millisecond, Hooks: []lily.Hook{hook},
		Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	transporttest.RunUntil(t, c, 60*time.Second, dead.Load)
	if !unroutable.Load() {
		t.Fatal("the hand-off to an unbound dead-letter queue was not reported as unroutable")
	}
	if !dead.Load() {
		t.Fatal("the message was not dead-lettered after the binding came back")
	}
	ds, err := tr.Peek(ctx, &rabbitmq.PeekParams{Queue: dlq})
	if err != nil || len(ds) != 1 || ds[0].EventID != msgs[0].EventID {
		t.Fatalf("dead-letter queue: %d messages (%v), want the one", len(ds), err)
	}
	if ds[0].Headers[evidence.HeaderReason] != "permanent" {
		t.Errorf("reason %v, want permanent", ds[0].Headers[evidence.HeaderReason])
	}
	if n, _ := tr.InFlight(ctx, qc.Name); n != 0 {
		t.Errorf("%d still in flight", n)
	}
}
