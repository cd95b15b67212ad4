package transporttest

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
)

// waitLimit bounds every wait of the suite so that a broken transport fails
// instead of hanging; it is not a performance assertion.
const waitLimit = 60 * time.Second

// Run runs every conformance behaviour against the harness's transport,
// each as a parallel subtest.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil || h.DeadLetters == nil || h.Abandon == nil {
		t.Fatal("transporttest: Harness needs New, DeadLetters and Abandon")
	}
	for _, b := range behaviours {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			b.run(t, h)
		})
	}
}

type behaviour struct {
	name string
	run  func(t *testing.T, h Harness)
}

// env is one subtest's world: a transport, a fresh queue, and the record of
// what was published and what the runtime reported.
type env struct {
	t     *testing.T
	h     Harness
	tr    transport.Transport // what the consumer uses (maybe a Faulty)
	base  transport.Transport // the transport itself, for inspection
	ctx   context.Context
	queue string
	qc    lily.QueueConfig

	mu        sync.Mutex
	published []string
	events    []lily.Event
	calls     map[string]int
	tornDown  *bool // set when the behaviour tore its queue down itself
}

// uniqueQueue returns a queue name made of the test's name and a random
// suffix.
func uniqueQueue(t *testing.T) string {
	name := strings.ToLower(strings.NewReplacer("/", ".", " ", "-").Replace(t.Name()))
	return fmt.Sprintf("tt.%s.%08x", name, rand.Uint32())
}

// newEnv declares a unique queue configured by qc (Name and Transport are
// filled in) on a new transport.
func newEnv(t *testing.T, h Harness, qc lily.QueueConfig) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitLimit)
	t.Cleanup(cancel)
	tr := h.New(t)
	t.Cleanup(func() { tr.Close() })
	qc.Name = uniqueQueue(t)
	qc.Transport = h.Name
	if h.Configure != nil {
		h.Configure(&qc)
	}
	if qc.Breaker == nil {
		// Behaviours that fail many messages on purpose are not outages.
		qc.Breaker = new(bool)
	}
	qc = qc.WithDefaults()
	if err := qc.Validate(); err != nil {
		t.Fatalf("queue config: %v", err)
	}
	tornDown := new(bool)
	if h.Teardown != nil {
		// Registered before Close's cleanup, so it runs first (LIFO).
		t.Cleanup(func() {
			if *tornDown {
				return
			}
			if err := h.Teardown(context.Background(), tr, qc.Spec()); err != nil {
				t.Errorf("teardown of %s: %v", qc.Name, err)
			}
		})
	}
	if d, ok := tr.(transport.Declarer); ok {
		if err := d.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
			t.Fatalf("declare %s: %v", qc.Name, err)
		}
	}
	return &env{t: t, h: h, tr: tr, base: tr, ctx: ctx, queue: qc.Name, qc: qc, calls: map[string]int{}, tornDown: tornDown}
}

// publish publishes msgs (event IDs assigned when empty) and records them.
func (e *env) publish(msgs ...transport.Message) []string {
	e.t.Helper()
	if err := lily.Publish(e.ctx, e.tr, e.queue, msgs); err != nil {
		e.t.Fatalf("publish: %v", err)
	}
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.EventID
	}
	e.mu.Lock()
	e.published = append(e.published, ids...)
	e.mu.Unlock()
	return ids
}

// bodies returns n messages with distinct bodies.
func bodies(n int, prefix string) []transport.Message {
	out := make([]transport.Message, n)
	for i := range out {
		out[i] = transport.Message{Body: []byte(fmt.Sprintf(`{"%s":%d}`, prefix, i))}
	}
	return out
}

// hook records the runtime's events.
func (e *env) hook() lily.Hook {
	return lily.HookFunc(func(_ context.Context, ev lily.Event) {
		e.mu.Lock()
		e.events = append(e.events, ev)
		e.mu.Unlock()
	})
}

// count returns how many events of kind were observed.
func (e *env) count(kind lily.EventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.events {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// terminal returns the distinct event IDs acknowledged or dead-lettered.
func (e *env) terminal() map[string]lily.EventKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]lily.EventKind{}
	for _, ev := range e.events {
		if ev.Kind == lily.EventAcked || ev.Kind == lily.EventDeadLettered {
			out[ev.EventID] = ev.Kind
		}
	}
	return out
}

// called counts a handler call for the delivery's event ID and returns the
// count so far.
func (e *env) called(d *lily.Delivery) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls[d.EventID]++
	return e.calls[d.EventID]
}

func (e *env) callsOf(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[id]
}

// consume runs a consumer with handler h until done reports true, then
// stops it gracefully. opts may adjust the consumer options.
func (e *env) consume(h lily.Handler, done func() bool, opts ...func(*lily.ConsumerOptions)) {
	e.t.Helper()
	o := lily.ConsumerOptions{
		Queue: e.qc, Concurrency: 4, Prefetch: 32, Name: "transporttest", Version: "v-test",
		Hooks: []lily.Hook{e.hook()}, ReceiveWait: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(newTestWriter(e.t), nil)),
	}
	for _, f := range opts {
		f(&o)
	}
	c, err := lily.NewConsumer(e.tr, h, o)
	if err != nil {
		e.t.Fatalf("new consumer: %v", err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	e.waitFor("consumer to finish its work", done)
	cancel()
	if err := <-errc; err != nil {
		e.t.Fatalf("consumer run: %v", err)
	}
}

// allTerminal reports whether every published message was acknowledged or
// dead-lettered.
func (e *env) allTerminal() bool {
	term := e.terminal()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range e.published {
		if _, ok := term[id]; !ok {
			return false
		}
	}
	return true
}

func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	WaitWithin(e.t, waitLimit, what, func() (bool, string) { return cond(), "" })
}

// deadLetters returns the queue's dead letters by event ID.
func (e *env) deadLetters() map[string]DeadLetter {
	e.t.Helper()
	dls, err := e.h.DeadLetters(e.ctx, e.base, e.queue)
	if err != nil {
		e.t.Fatalf("dead letters of %s: %v", e.queue, err)
	}
	out := map[string]DeadLetter{}
	for _, d := range dls {
		if _, dup := out[d.EventID]; dup {
			e.t.Errorf("event %s dead-lettered twice", d.EventID)
		}
		out[d.EventID] = d
	}
	return out
}

// deadLetter is the dead letter of event id; the test stops if there is
// none.
func (e *env) deadLetter(id string) DeadLetter {
	e.t.Helper()
	dl, ok := e.deadLetters()[id]
	if !ok {
		e.t.Fatalf("message %s not dead-lettered", id)
	}
	return dl
}

// conserve checks that every published message is acknowledged,
// dead-lettered or still in flight, that nothing else appeared, and that
// inFlight messages are still held. A failure logs the explanation
// (Conservation.Explain): the broker's count and the event IDs that differ.
func (e *env) conserve(inFlight int64) {
	e.t.Helper()
	dls := e.deadLetters()
	term := e.terminal()
	e.mu.Lock()
	published := slices.Clone(e.published)
	events := slices.Clone(e.events)
	e.mu.Unlock()
	failed := false
	fail := func(format string, args ...any) {
		e.t.Helper()
		failed = true
		e.t.Errorf(format, args...)
	}
	known := map[string]bool{}
	var missing []string
	for _, id := range published {
		known[id] = true
		_, acked := term[id]
		_, dead := dls[id]
		if !acked && !dead {
			missing = append(missing, id)
		}
	}
	for id := range dls {
		if !known[id] {
			fail("conservation: dead letter %s was never published (invented)", id)
		}
	}
	for id := range term {
		if !known[id] {
			fail("conservation: event %s settled but never published (invented)", id)
		}
	}
	n, ok := e.h.inFlight(e.ctx, e.t, e.base, e.queue)
	if ok && n != inFlight {
		fail("conservation: %d messages in flight in %s, want %d", n, e.queue, inFlight)
	}
	if int64(len(missing)) != inFlight {
		fail("conservation: %d of %d published messages neither acked nor dead-lettered (want %d in flight): %v",
			len(missing), len(published), inFlight, missing)
	}
	if failed {
		e.t.Log(e.explain(published, events, dls, n, ok))
	}
}

// testWriter sends the consumer's log to the test log (shown on failure
// or with -v). A handler the runtime abandoned can return, and log, after
// its test has ended; testing.T must not be used then (the race detector
// reports it against the testing package's own bookkeeping), so the writer
// drops what arrives after the test's cleanup.
type testWriter struct {
	mu    sync.Mutex
	t     testing.TB
	ended bool
}

// Logger returns a logger of level and above to t's log (shown when t
// fails, or with -v), quiet once t has ended: a transport's warnings
// (a pull cut short, a lease not extended) then explain a failure from the
// CI log alone.
func Logger(t testing.TB, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewTextHandler(newTestWriter(t), &slog.HandlerOptions{Level: level}))
}

// newTestWriter returns a writer to t's log that goes quiet when t ends.
func newTestWriter(t testing.TB) *testWriter {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.ended = true
		w.mu.Unlock()
	})
	return w
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
