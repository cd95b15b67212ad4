package transporttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// RunLoad runs the real-traffic behaviours of docs/design.md §11 against the
// harness's transport: competing consumers, slow handlers (longer than a
// lease), a hanging dependency, a dead-lettered breaker probe and a
// graceful hand-over. They run one after the other, not in parallel: each
// checks that the goroutine count returns to what it was before its
// consumers started. Each ends with conservation and, where nothing failed
// or crashed, with handler calls = messages and no delivery counted twice
// (so none turned a consumer cautious or neared delivery_limit).
//
// Harness.Lease should be the visibility timeout of the transports New
// returns, when they lease (make it short: the slow handlers run longer
// than it).
func RunLoad(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil || h.DeadLetters == nil || h.Abandon == nil {
		t.Fatal("transporttest: Harness needs New, DeadLetters and Abandon")
	}
	for _, b := range loadBehaviours {
		t.Run(b.name, func(t *testing.T) { b.run(t, h) })
	}
}

var loadBehaviours = []behaviour{
	{"CompetingConsumers", testCompetingConsumers},
	{"SlowHandlers", testSlowHandlers},
	{"HangingDependency", testHangingDependency},
	{"DeadLetteredProbe", testDeadLetteredProbe},
	{"GracefulHandOver", testGracefulHandOver},
}

// load is one load behaviour's bookkeeping beside its env.
type load struct {
	*env
	goroutines int
	recounted  atomic.Int64 // deliveries seen with a count above 1
}

// newLoad declares the queue and publishes n messages. The goroutine count
// is taken first, before the transport opens: goroutinesBack compares it
// after the consumers stopped and the transport closed (a broker client
// opens connections lazily, each with goroutines of its own, that belong
// to the transport and end with it).
func newLoad(t *testing.T, h Harness, qc lily.QueueConfig, n int, prefix string) *load {
	t.Helper()
	g := ownGoroutines()
	e := newEnv(t, h, qc)
	if n > 0 {
		e.publish(bodies(n, prefix)...)
	}
	return &load{env: e, goroutines: g}
}

// track counts a handler call of d.
func (l *load) track(d *lily.Delivery) int {
	if d.DeliveryCount > 1 {
		l.recounted.Add(1)
	}
	return l.called(d)
}

// start runs a consumer with handler h until the returned stop is called;
// stop waits for Run to return.
func (l *load) start(h lily.Handler, opts ...func(*lily.ConsumerOptions)) (stop func()) {
	l.t.Helper()
	o := lily.ConsumerOptions{
		Queue: l.qc, Concurrency: 4, Prefetch: 256, Name: "transporttest", Version: "v-test",
		Hooks: []lily.Hook{l.hook()}, ReceiveWait: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(newTestWriter(l.t), nil)),
	}
	for _, f := range opts {
		f(&o)
	}
	c, err := lily.NewConsumer(l.tr, h, o)
	if err != nil {
		l.t.Fatalf("new consumer: %v", err)
	}
	ctx, cancel := context.WithCancel(l.ctx)
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-errc; err != nil {
				l.t.Errorf("consumer run: %v", err)
			}
		})
	}
	l.t.Cleanup(stop)
	return stop
}

// exactlyOnce checks a run with no crash and no fault: every message's
// handler was called exactly once, no delivery was counted twice, and
// nothing was dead-lettered.
func (l *load) exactlyOnce() {
	l.t.Helper()
	l.mu.Lock()
	published := append([]string(nil), l.published...)
	calls, total := 0, 0
	for _, id := range published {
		if n := l.calls[id]; n != 1 {
			l.t.Errorf("message %s: %d handler calls, want 1", id, n)
		}
		calls += l.calls[id]
	}
	for _, n := range l.calls {
		total += n
	}
	l.mu.Unlock()
	if total != len(published) || calls != total {
		l.t.Errorf("handler calls %d for %d messages, want one each", total, len(published))
	}
	if n := l.recounted.Load(); n != 0 {
		l.t.Errorf("%d deliveries had a delivery count above 1 (a duplicate, or a turn to cautious mode, with no crash)", n)
	}
	if dls := l.deadLetters(); len(dls) != 0 {
		l.t.Errorf("%d dead letters, want none", len(dls))
	}
}

// ackedOnce waits until every message is acked, stops the consumers
// and checks the run: each message handled exactly once, the ledger
// balanced, no goroutine left behind.
func (l *load) ackedOnce(stops ...func()) {
	l.t.Helper()
	l.waitFor("every message acked", l.allTerminal)
	for _, stop := range stops {
		stop()
	}
	l.exactlyOnce()
	l.conserve(0)
	l.goroutinesBack()
}

// goroutinesBack closes the transport (after Run returned: every consumer
// has stopped) and waits until the goroutine count is back to its start.
func (l *load) goroutinesBack() {
	l.t.Helper()
	if h := l.h.Teardown; h != nil {
		*l.tornDown = true
		if err := h(context.Background(), l.base, l.qc.Spec()); err != nil {
			l.t.Errorf("teardown of %s: %v", l.queue, err)
		}
	}
	l.base.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if ok, _ := Poll(ctx, func() (bool, string) { return ownGoroutines() <= l.goroutines, "" }); !ok {
		l.t.Errorf("%d goroutines after the consumers stopped, %d before they started:\n%s", ownGoroutines(), l.goroutines, strings.Join(ownStacks(), "\n\n"))
	}
}

// embeddedServers are the packages of servers a test process may embed
// (natstest's nats-server): their goroutines come and go with the
// server's own work — a stream's loops live as long as the stream — and
// are not the transport's.
var embeddedServers = []string{"github.com/nats-io/nats-server/"}

// ownStacks returns the stacks of the process's goroutines but those of an
// embedded server.
func ownStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var own []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !slices.ContainsFunc(embeddedServers, func(pkg string) bool { return strings.Contains(g, pkg) }) {
			own = append(own, g)
		}
	}
	return own
}

// ownGoroutines counts the process's goroutines but those of an embedded
// server.
func ownGoroutines() int { return len(ownStacks()) }

// slowFor is how long a slow handler runs: longer than the harness's lease.
func (h Harness) slowFor() time.Duration {
	if h.Lease > 0 {
		return h.Lease * 3 / 2
	}
	return 300 * time.Millisecond
}

// testCompetingConsumers: four consumers on one queue take every message
// exactly once. On a lease-based transport the handlers take a twentieth
// of a lease each: a consumer that leased the whole queue at once could
// not start it all within the lease.
func testCompetingConsumers(t *testing.T, h Harness) {
	l := newLoad(t, h, lily.QueueConfig{}, 200, "compete")
	work := 2 * time.Millisecond
	if h.Lease > 0 {
		work = h.Lease / 20
	}
	handler := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		l.track(d)
		time.Sleep(work) // simulates the handler's work
		return nil
	})
	var stops []func()
	for i := range 4 {
		stops = append(stops, l.start(handler, func(o *lily.ConsumerOptions) { o.Instance = fmt.Sprintf("compete-%d-%s", i, o.Queue.Name) }))
	}
	l.ackedOnce(stops...)
}

// testSlowHandlers: handlers that run longer than a lease, with two
// competing consumers holding a large prefetch: no lease runs out in Lily's
// own buffer, so no message is handled twice.
func testSlowHandlers(t *testing.T, h Harness) {
	slow := h.slowFor()
	l := newLoad(t, h, lily.QueueConfig{HandlerTimeoutMillis: new((20 * slow).Milliseconds())}, 8, "slow")
	handler := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		l.track(d)
		select {
		case <-time.After(slow):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	var stops []func()
	for i := range 2 {
		stops = append(stops, l.start(handler, func(o *lily.ConsumerOptions) {
			o.Instance = fmt.Sprintf("slow-%d-%s", i, o.Queue.Name)
			o.Concurrency = 2
		}))
	}
	l.ackedOnce(stops...)
}

// errDown is the hanging dependency's failure, for the probe test.
var errDown = errors.New("dependency down")

// testHangingDependency: every handler hangs on a dependency and ignores
// its context. Each is abandoned after its timeout and grace and counted as
// a failure, so the breaker opens; the abandoned handlers keep their slots,
// so at most Concurrency handlers run and the consumer reports the stall;
// no delivery is released (its count would rise toward delivery_limit):
// nothing is dead-lettered. When the dependency recovers every message is
// processed.
func testHangingDependency(t *testing.T, h Harness) {
	on := true
	l := newLoad(t, h, lily.QueueConfig{
		RetryAttempts: 3, RetryBackoffMillis: new(int64(50)), HandlerTimeoutMillis: new(int64(50)), Breaker: &on,
		BreakerMinRequests: new(4), BreakerFailureRatio: new(0.5), BreakerCooldownMillis: new(int64(200)),
	}, 20, "hang")
	hang := make(chan struct{})
	var unblock sync.Once
	defer unblock.Do(func() { close(hang) })
	var running, most atomic.Int64
	handler := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		l.track(d)
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-hang // the dependency hangs; the handler ignores its context
		return nil
	})
	stop := l.start(handler, func(o *lily.ConsumerOptions) { o.AbandonGrace = 50 * time.Millisecond })
	l.waitFor("the breaker to open and the consumer to report its stall", func() bool {
		return l.breakerWas(lily.BreakerOpen) && l.count(lily.EventStalled) > 0
	})
	unblock.Do(func() { close(hang) }) // the dependency recovers
	l.waitFor("every message acked", l.allTerminal)
	stop()
	if m := most.Load(); m > 4 {
		t.Errorf("%d handlers ran at once, want at most Concurrency (4): abandoned handlers must keep their slots", m)
	}
	if n := l.recounted.Load(); n != 0 {
		t.Errorf("%d deliveries with a raised delivery count: an abandoned delivery must be held in a bucket, not released", n)
	}
	if n := l.count(lily.EventReleased); n != 0 {
		t.Errorf("%d releases, want 0", n)
	}
	if dls := l.deadLetters(); len(dls) != 0 {
		t.Errorf("%d dead letters from a dependency outage, want none", len(dls))
	}
	l.conserve(0)
	l.goroutinesBack()
}

// breakerWas reports whether the breaker entered state s.
func (l *load) breakerWas(s lily.BreakerState) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.events {
		if ev.Kind == lily.EventBreaker && ev.Breaker == s {
			return true
		}
	}
	return false
}

// testDeadLetteredProbe: the breaker opens during an outage; the message
// published once it is half-open — the probe — is dead-lettered
// before its handler runs (a non-canonical x-retry-count). Its settlement
// returns the probe: the next message probes again, the breaker closes and
// the queue drains.
func testDeadLetteredProbe(t *testing.T, h Harness) {
	on := true
	l := newLoad(t, h, lily.QueueConfig{
		RetryAttempts: 3, RetryBackoffMillis: new(int64(3000)), Breaker: &on,
		BreakerMinRequests: new(4), BreakerFailureRatio: new(0.5), BreakerCooldownMillis: new(int64(500)),
	}, 4, "down")
	var down atomic.Bool
	down.Store(true)
	opened := lily.HookFunc(func(_ context.Context, ev lily.Event) {
		if ev.Kind == lily.EventBreaker && ev.Breaker == lily.BreakerOpen {
			down.Store(false) // the dependency recovers during the cooldown
		}
	})
	handler := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		l.track(d)
		if down.Load() {
			return errDown
		}
		return nil
	})
	stop := l.start(handler, func(o *lily.ConsumerOptions) { o.Hooks = append(o.Hooks, opened) })
	l.waitFor("the breaker to turn half-open", func() bool { return l.breakerWas(lily.BreakerHalfOpen) })
	// Published once half-open, with nothing else there (the retry copies
	// of the failures come back later): the probe fetches it.
	bad := l.publish(transport.Message{Body: []byte("bad retry count"), Headers: transport.Headers{evidence.HeaderRetryCount: "0"}})[0]
	l.waitFor("the bad message dead-lettered", func() bool { _, ok := l.terminal()[bad]; return ok })
	l.publish(bodies(3, "after")...)
	l.waitFor("every message acked or dead-lettered", l.allTerminal)
	stop()
	l.mu.Lock()
	halfOpen, probed := -1, -1
	for i, ev := range l.events {
		if ev.Kind == lily.EventBreaker && ev.Breaker == lily.BreakerHalfOpen && halfOpen < 0 {
			halfOpen = i
		}
		if ev.Kind == lily.EventDeadLettered && ev.EventID == bad {
			probed = i
		}
	}
	closedAfter := false
	for _, ev := range l.events[max(probed, 0):] {
		closedAfter = closedAfter || (ev.Kind == lily.EventBreaker && ev.Breaker == lily.BreakerClosed)
	}
	l.mu.Unlock()
	if halfOpen < 0 || probed < halfOpen {
		t.Fatalf("the bad message was not the half-open probe (half-open at event %d, dead-lettered at %d)", halfOpen, probed)
	}
	if !closedAfter {
		t.Error("the breaker did not close after the dead-lettered probe")
	}
	dls := l.deadLetters()
	if d, ok := dls[bad]; !ok || d.Reason != string(evidence.ReasonInvalidRetryCount) || len(dls) != 1 {
		t.Errorf("dead letters %v, want only the bad message with reason invalid_retry_count", dls)
	}
	if l.callsOf(bad) != 0 {
		t.Errorf("the bad message's handler was called %d times, want 0", l.callsOf(bad))
	}
	l.conserve(0)
	l.goroutinesBack()
}

// testGracefulHandOver: a consumer with a large prefetch is stopped while
// it holds deliveries it has not started; another one takes over. What the
// first received and no handler saw goes back uncounted where the
// transport can (transport.Unreceiver: SQLite in place, RabbitMQ by a
// confirmed copy; no handler starts after the stop beyond the ones already
// being picked up), else it is processed before the stop ends; either way no message is handled twice or comes back to
// the successor with a raised delivery count.
func testGracefulHandOver(t *testing.T, h Harness) {
	l := newLoad(t, h, lily.QueueConfig{}, 64, "handover")
	var stopping atomic.Bool
	var afterStop atomic.Int64
	first := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if stopping.Load() {
			afterStop.Add(1)
		}
		l.track(d)
		time.Sleep(50 * time.Millisecond) // simulates the handler's work: the stop finds deliveries waiting
		return nil
	})
	stop := l.start(first, func(o *lily.ConsumerOptions) { o.Instance = "first-" + o.Queue.Name })
	l.waitFor("the first consumer to ack a few", func() bool { return l.count(lily.EventAcked) >= 8 })
	stopping.Store(true)
	stop()
	if _, ok := l.base.(transport.Unreceiver); ok { // it gives back what no handler saw
		if n := afterStop.Load(); n > 4 {
			t.Errorf("%d handlers started after the stop, want at most the 4 workers already picking: deliveries no handler saw must go back", n)
		}
	}
	l.publish(bodies(16, "later")...)
	second := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		l.track(d)
		return nil
	})
	stop2 := l.start(second, func(o *lily.ConsumerOptions) { o.Instance = "second-" + o.Queue.Name })
	l.ackedOnce(stop2)
}
