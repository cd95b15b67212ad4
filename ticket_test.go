package lily_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// memQueue is a minimal in-memory transport: Receive hands out what was
// queued (with the delivery count given), Settle records the actions.
type memQueue struct {
	mu      sync.Mutex
	ready   []*transport.Delivery
	settled map[string]transport.Action
	leases  bool
}

func (m *memQueue) push(d *transport.Delivery) {
	m.mu.Lock()
	m.ready = append(m.ready, d)
	m.mu.Unlock()
}

func (m *memQueue) Publish(context.Context, *transport.PublishParams) error { return nil }

func (m *memQueue) Receive(ctx context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	m.mu.Lock()
	n := min(max(p.Max, 1), len(m.ready))
	out := append([]*transport.Delivery(nil), m.ready[:n]...)
	m.ready = m.ready[n:]
	m.mu.Unlock()
	if len(out) == 0 && p.Wait > 0 {
		t := time.NewTimer(min(p.Wait, 5*time.Millisecond))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	return out, nil
}

func (m *memQueue) Settle(_ context.Context, p *transport.SettleParams) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.settled == nil {
		m.settled = map[string]transport.Action{}
	}
	for _, s := range p.Settlements {
		m.settled[s.Delivery.EventID] = s.Action
	}
	return nil
}

func (m *memQueue) Close() error { return nil }

func (m *memQueue) action(id string) transport.Action {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.settled[id]
}

// Features: parking in a catalog (so that ordering park is allowed), and
// leases of 1s when asked.
func (m *memQueue) Features() transport.Features {
	f := transport.Features{CatalogParking: true}
	if m.leases {
		f.Leases, f.VisibilityTimeout = true, time.Second
	}
	return f
}

// failingKeys is a KeyStore whose reads fail.
type failingKeys struct{}

func (failingKeys) KeyState(context.Context, string, string) (string, string, string, error) {
	return "", "", "", errors.New("catalog unreachable")
}
func (failingKeys) HoldKey(context.Context, string, string, string, string, string) error {
	return errors.New("catalog unreachable")
}
func (failingKeys) AdvanceKey(context.Context, string, string, transport.Transport) (bool, error) {
	return false, errors.New("catalog unreachable")
}
func (failingKeys) ResumeKeys(context.Context, string, transport.Transport) (int, error) {
	return 0, nil
}

// TestProbeSettledWithoutOutcome: when the half-open breaker's probe is
// settled without a handler outcome — dead-lettered over delivery_limit,
// or released because the key store failed — the probe comes back with its
// settlement: the next delivery probes, succeeds and closes the breaker.
func TestProbeSettledWithoutOutcome(t *testing.T) {
	for _, tc := range []struct {
		name     string
		count    int
		key      string
		ordering string
		keys     lily.KeyStore
		want     transport.Action
	}{
		{name: "delivery_limit", count: 99, want: transport.DeadLetter},
		{name: "key_store_error", count: 1, key: "k", ordering: lily.OrderingPark, keys: failingKeys{}, want: transport.Release},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on := true
			q := &memQueue{}
			for _, id := range []string{"f1", "f2"} {
				q.push(&transport.Delivery{Message: transport.Message{EventID: id}, DeliveryCount: 1})
			}
			var down atomic.Bool
			down.Store(true)
			var states []lily.BreakerState
			var smu sync.Mutex
			hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
				if e.Kind != lily.EventBreaker {
					return
				}
				smu.Lock()
				states = append(states, e.Breaker)
				smu.Unlock()
				if e.Breaker == lily.BreakerHalfOpen {
					// The probe: a delivery settled without an outcome; then a
					// healthy one.
					q.push(&transport.Delivery{Message: transport.Message{EventID: "probe", Key: tc.key}, DeliveryCount: tc.count})
					q.push(&transport.Delivery{Message: transport.Message{EventID: "ok"}, DeliveryCount: 1})
				}
			})
			qc := lily.QueueConfig{Name: "probe.q", RetryAttempts: 1, Breaker: &on, BreakerMinRequests: new(2),
				BreakerCooldownMillis: new(int64(20)), Ordering: tc.ordering}
			c, err := lily.NewConsumer(q, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
				if down.Load() && d.EventID != "ok" {
					return errors.New("dependency down")
				}
				return nil
			}), lily.ConsumerOptions{Queue: qc, Concurrency: 1, Prefetch: 1, ReceiveWait: 5 * time.Millisecond,
				Hooks: []lily.Hook{hook}, Keys: tc.keys, KeyPoll: time.Hour,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			stop := transporttest.Start(t, c)
			waittest.For(t, "the probe settled and the breaker closed", func() bool {
				return q.action("ok") == transport.Ack && c.BreakerState() == lily.BreakerClosed
			})
			stop()
			if a := q.action("probe"); a != tc.want {
				t.Errorf("probe settled as %s, want %s", a, tc.want)
			}
			smu.Lock()
			defer smu.Unlock()
			if len(states) < 3 || states[0] != lily.BreakerOpen || states[len(states)-1] != lily.BreakerClosed {
				t.Errorf("breaker changes %v, want open … closed", states)
			}
		})
	}
}

// TestLeaseBudgetRefused: on a transport whose leases cannot be extended,
// a handler timeout (with its grace and the immediate retries) that does
// not fit in the lease is refused, naming the fields and the fix; with a
// budget inside the lease the consumer is made.
func TestLeaseBudgetRefused(t *testing.T) {
	q := &memQueue{leases: true}
	h := lily.HandlerFunc(func(context.Context, *lily.Delivery) error { return nil })
	_, err := lily.NewConsumer(q, h, lily.ConsumerOptions{Queue: lily.QueueConfig{Name: "lease.q"}})
	if !errors.Is(err, lily.ErrInvalidConfig) || !strings.Contains(err.Error(), "handler_timeout_millis 30000") ||
		!strings.Contains(err.Error(), "lease 1s") || !strings.Contains(err.Error(), "Lower handler_timeout_millis") {
		t.Fatalf("NewConsumer with the default 30s timeout on a 1s lease: %v, want a refusal naming the field, the lease and the fix", err)
	}
	_, err = lily.NewConsumer(q, h, lily.ConsumerOptions{Queue: lily.QueueConfig{Name: "lease.q", HandlerTimeoutMillis: new(int64(300)),
		ImmediateRetries: 2, ImmediateRetryMillis: new(int64(100))}, AbandonGrace: 50 * time.Millisecond})
	if !errors.Is(err, lily.ErrInvalidConfig) || !strings.Contains(err.Error(), "immediate_retries 2") {
		t.Fatalf("3 × 350ms + 2 × 100ms on a 1s lease: %v, want a refusal naming immediate_retries", err)
	}
	if _, err := lily.NewConsumer(q, h, lily.ConsumerOptions{Queue: lily.QueueConfig{Name: "lease.q", HandlerTimeoutMillis: new(int64(500))},
		AbandonGrace: 100 * time.Millisecond}); err != nil {
		t.Fatalf("600ms on a 1s lease refused: %v", err)
	}
}

// openSQLite opens a SQLite transport with a declared queue.
func openSQLite(t *testing.T, qc lily.QueueConfig, lease time.Duration) *sqlite.Transport {
	t.Helper()
	tr, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "t.db"), sqlite.Options{VisibilityTimeout: lease, PollInterval: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if err := tr.Declare(context.Background(), &transport.DeclareParams{Queues: []transport.QueueSpec{qc.WithDefaults().Spec()}}); err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestImmediateRetriesStopWithTheConsumer: the pause between immediate
// retries ends when the consumer stops; the failure then takes the broker
// retry at once instead of sleeping (and holding the lease) through the
// remaining immediate retries.
func TestImmediateRetriesStopWithTheConsumer(t *testing.T) {
	qc := lily.QueueConfig{Name: "imm.q", RetryAttempts: 1, ImmediateRetries: 3, ImmediateRetryMillis: new(int64(10000)), HandlerTimeoutMillis: new(int64(1000))}
	tr := openSQLite(t, qc, time.Minute)
	if err := lily.Publish(context.Background(), tr, qc.Name, []lily.Message{{Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	var retried atomic.Bool
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(context.Context, *lily.Delivery) error {
		calls.Add(1)
		return errors.New("blip")
	}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Hooks: []lily.Hook{lily.HookFunc(func(_ context.Context, e lily.Event) {
			if e.Kind == lily.EventRetried {
				retried.Store(true)
			}
		})}})
	if err != nil {
		t.Fatal(err)
	}
	stop := transporttest.Start(t, c)
	waittest.For(t, "the first call", func() bool { return calls.Load() == 1 })
	stop()
	if !retried.Load() || calls.Load() != 1 {
		t.Errorf("after the stop: %d calls, retried %v; want 1 call and the broker retry taken", calls.Load(), retried.Load())
	}
	if n, err := tr.InFlight(context.Background(), qc.Name); err != nil || n != 1 {
		t.Errorf("in flight %d (%v), want the retry copy (1)", n, err)
	}
}

// TestDeadLetteredLoggedAfterSettlement: a dead-lettering whose hand-off
// fails is not logged as "dead-lettered" (the settlement failure is); the
// line comes once, when the hand-off on redelivery is confirmed.
func TestDeadLetteredLoggedAfterSettlement(t *testing.T) {
	qc := lily.QueueConfig{Name: "log.q"}
	tr := openSQLite(t, qc, time.Minute)
	if err := lily.Publish(context.Background(), tr, qc.Name, []lily.Message{{Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	faulty := transporttest.NewFaulty(tr)
	faulty.FailSettle(transport.DeadLetter, 1, nil)
	var buf transporttest.SyncBuffer
	var dead atomic.Int64
	c, err := lily.NewConsumer(faulty, lily.HandlerFunc(func(context.Context, *lily.Delivery) error {
		return lily.Permanent(errors.New("bad order"))
	}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&buf, nil)),
		Hooks: []lily.Hook{lily.HookFunc(func(_ context.Context, e lily.Event) {
			if e.Kind == lily.EventDeadLettered {
				dead.Add(1)
			}
		})}})
	if err != nil {
		t.Fatal(err)
	}
	stop := transporttest.Start(t, c)
	waittest.For(t, "the dead letter confirmed", func() bool { return dead.Load() == 1 })
	stop()
	out := buf.String()
	if n := strings.Count(out, "msg=dead-lettered "); n != 1 {
		t.Errorf("%d \"dead-lettered\" lines for one dead letter whose first hand-off failed, want 1:\n%s", n, out)
	}
	if i, j := strings.Index(out, "settlement not confirmed"), strings.Index(out, "msg=dead-lettered "); i < 0 || j < i {
		t.Errorf("want the failed hand-off logged first, then the confirmed dead-lettering:\n%s", out)
	}
}

// TestAbandonedHandlersBounded: handlers that hang keep their handler
// slots after they are abandoned, so no more than Concurrency run at once;
// with every slot held the consumer reports the stall (EventStalled) and
// the count of abandoned handlers (EventAbandoned); Run returns without
// waiting for them, and once they return the goroutines are back to where
// they started.
func TestAbandonedHandlersBounded(t *testing.T) {
	start := runtime.NumGoroutine()
	qc := lily.QueueConfig{Name: "hang.q", RetryAttempts: 3, RetryBackoffMillis: new(int64(20)), HandlerTimeoutMillis: new(int64(20))}
	tr := openSQLite(t, qc, time.Minute)
	msgs := make([]lily.Message, 20)
	for i := range msgs {
		msgs[i].Body = []byte("x")
	}
	if err := lily.Publish(context.Background(), tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	hang := make(chan struct{})
	var running, most atomic.Int64
	var stalled, abandonedMax atomic.Int64
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(context.Context, *lily.Delivery) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-hang
		return nil
	}), lily.ConsumerOptions{Queue: qc, Concurrency: 3, ReceiveWait: 10 * time.Millisecond, AbandonGrace: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Hooks: []lily.Hook{lily.HookFunc(func(_ context.Context, e lily.Event) {
			switch e.Kind {
			case lily.EventStalled:
				stalled.Add(1)
			case lily.EventAbandoned:
				for m := abandonedMax.Load(); int64(e.Abandoned) > m && !abandonedMax.CompareAndSwap(m, int64(e.Abandoned)); m = abandonedMax.Load() {
				}
			}
		})}})
	if err != nil {
		t.Fatal(err)
	}
	stop := transporttest.Start(t, c)
	waittest.For(t, "the stall reported", func() bool { return stalled.Load() > 0 })
	stop() // returns although three handlers still hang
	if m := most.Load(); m > 3 {
		t.Errorf("%d handlers ran at once, want at most Concurrency (3)", m)
	}
	if m := abandonedMax.Load(); m != 3 {
		t.Errorf("at most %d abandoned handlers reported, want 3", m)
	}
	close(hang)
	tr.Close()
	waittest.ForState(t, "the consumer's goroutines to end", func() (bool, string) {
		n := runtime.NumGoroutine()
		return n <= start, fmt.Sprintf("%d goroutines, %d before the consumer ran", n, start)
	})
}
