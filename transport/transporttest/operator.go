package transporttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// OperatorHarness connects the operator paths (docs/design.md §9.3, §9.4,
// §11) to one transport and one catalog store: what an operator does to
// dead letters — redrive, redirect, sample, rate, cancel, resume after a
// runner died, discard — through the public redrive and catalog APIs.
type OperatorHarness struct {
	// Name is the transport's name in QueueConfig.Transport.
	Name string
	// Open returns, for one subtest, the transport the consumers and the
	// redrives use — a broker transport wrapped with ledger.Account, or
	// the SQLite transport on the catalog's own file — and its catalog.
	// The scenario closes neither.
	Open func(t *testing.T) (transport.Transport, *catalog.Store)
	// Teardown, when set, removes a subtest's queue after it ended.
	Teardown func(ctx context.Context, tr transport.Transport, spec transport.QueueSpec) error
	// Configure, when set, adjusts every queue configuration the
	// scenarios build (as Harness.Configure).
	Configure func(q *lily.QueueConfig)
	// FanOut is set for a transport whose queue's messages reach other
	// readers too (Kafka consumer groups, Pub/Sub subscriptions, RabbitMQ
	// queues bound to the queue's exchange). It starts, before anything is
	// published, another reader of queue's messages, which is not Lily's;
	// drain returns every message that reader got, by event ID, once it
	// has read all there is to read. The "failing consumer alone"
	// scenario runs only with it.
	FanOut func(ctx context.Context, t *testing.T, tr transport.Transport, queue string) (drain func() map[string]int)
	// PublishShared, when set, publishes msgs to queue the way a producer
	// that feeds every reader does, for the "failing consumer alone"
	// scenario: on RabbitMQ through the queue's exchange (Lily's own
	// publisher goes to the queue alone). Nil: lily.Publish, which on a
	// log or a topic reaches every reader already.
	PublishShared func(ctx context.Context, t *testing.T, tr transport.Transport, queue string, msgs []lily.Message)
	// FullDLQ is set for a transport whose dead-letter queue honours
	// dlq_max_length and refuses what is over it (RabbitMQ): the "full
	// DLQ" scenario runs only with it.
	FullDLQ bool
	// Oversized, when set, publishes to queue one message that the queue
	// takes but whose dead-letter copy — with the evidence of a handler's
	// error of MaxErrorMessageBytes — the dead-letter destination refuses
	// as too large, and returns its event ID. The "oversized" scenario
	// runs only with it.
	Oversized func(ctx context.Context, t *testing.T, tr transport.Transport, queue string) string
}

type opScenario struct {
	name string
	run  func(t *testing.T, e *opEnv)
	// queue, when set, adjusts the scenario's queue configuration.
	queue func(q *lily.QueueConfig)
}

// OperatorPaths runs the operator paths on the harness's transport and
// catalog, each a parallel subtest on its own queue: redrive to the
// source; redrive reaching the failing consumer alone (with FanOut);
// redirect to another queue; a job's sample that proves the fix, and one
// that stops the job; a rate-limited redrive, checked by its token bucket;
// a job cancelled while it runs; a job whose runner dies mid-job and is
// resumed by another; one message's whole path as one OpenTelemetry trace;
// a full DLQ (FullDLQ) and an oversized dead letter (Oversized). Each ends with conservation: every message acked once,
// dead-lettered (pending in the catalog), redirected or discarded with a
// record, and the ledger balanced with nothing in flight.
func OperatorPaths(t *testing.T, h OperatorHarness) {
	t.Helper()
	if h.Open == nil {
		t.Fatal("transporttest: OperatorHarness needs Open")
	}
	scs := []opScenario{
		{name: "redrive/origin", run: func(t *testing.T, e *opEnv) { opRedrive(t, e, nil) }},
		{name: "redirect", run: opRedirect},
		{name: "sample/clean", run: opSampleClean},
		{name: "sample/stopped", run: opSampleStopped},
		{name: "rate", run: opRate},
		{name: "cancel", run: opCancel},
		{name: "runner-dies", run: opRunnerDies},
		{name: "trace", run: opTrace, queue: func(q *lily.QueueConfig) {
			q.RetryAttempts, q.RetryBackoffMillis, q.MaxRetryBackoffMillis = 1, new(int64(20)), new(int64(40))
		}},
	}
	if h.FanOut != nil {
		scs = append(scs, opScenario{name: "redrive/failing-consumer-alone", run: opRedriveAlone})
	}
	if h.FullDLQ {
		scs = append(scs, opScenario{name: "full-dlq", run: opFullDLQ, queue: func(q *lily.QueueConfig) { q.DLQMaxLength = new(int64(fullDLQRoom)) }})
	}
	if h.Oversized != nil {
		scs = append(scs, opScenario{name: "oversized", run: opOversized})
	}
	for _, sc := range scs {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, newOpEnv(t, h, sc.queue))
		})
	}
}

// errNotFixed is the handler's failure until the fix is "deployed".
var errNotFixed = errors.New("transporttest: order schema v2 is not supported yet")

// opEnv is one operator scenario's world: a transport, its catalog, a
// queue, and what the runtime reported.
type opEnv struct {
	t   *testing.T
	h   OperatorHarness
	tr  transport.Transport
	cat *catalog.Store
	rd  *redrive.Redriver
	ctx context.Context
	qc  lily.QueueConfig
	// fixed makes the handler succeed: the fix is deployed.
	fixed atomic.Bool
	// errText, when set, is the handler's error before the fix.
	errText string
	// shared publishes through Harness.PublishShared.
	shared bool
	// serial consumes one delivery, and hands off one copy, at a time.
	serial bool
	// transient makes the handler's failure before the fix transient
	// (retried, then retries_exhausted) instead of permanent.
	transient bool
	// tp traces the consumers when set (the trace scenario).
	tp trace.TracerProvider

	mu        sync.Mutex
	published []string
	acked     map[string]map[string]int // queue → event ID → acks
	dead      map[string]int            // event ID → dead-letterings
	refused   map[string]string         // event ID → why the DLQ refused it
	redrives  map[string]int            // event ID → redrive count of its last delivery
	running   func()                    // stops the queue's consumer (consuming)
}

func newOpEnv(t *testing.T, h OperatorHarness, mod func(*lily.QueueConfig)) *opEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitLimit)
	t.Cleanup(cancel)
	tr, cat := h.Open(t)
	e := &opEnv{t: t, h: h, tr: tr, cat: cat, rd: redrive.New(cat), ctx: ctx,
		acked: map[string]map[string]int{}, dead: map[string]int{}, refused: map[string]string{}, redrives: map[string]int{}}
	e.qc = e.declare(uniqueQueue(t), mod)
	return e
}

// declare declares queue name (configured by mod) and removes it when the
// test ends.
func (e *opEnv) declare(name string, mod func(*lily.QueueConfig)) lily.QueueConfig {
	e.t.Helper()
	qc := lily.QueueConfig{Name: name, Transport: e.h.Name, Breaker: new(bool)}
	if mod != nil {
		mod(&qc)
	}
	if e.h.Configure != nil {
		e.h.Configure(&qc)
	}
	qc = qc.WithDefaults()
	if err := qc.Validate(); err != nil {
		e.t.Fatalf("queue config: %v", err)
	}
	if e.h.Teardown != nil {
		e.t.Cleanup(func() {
			if err := e.h.Teardown(context.Background(), e.tr, qc.Spec()); err != nil {
				e.t.Errorf("teardown of %s: %v", qc.Name, err)
			}
		})
	}
	if d, ok := e.tr.(transport.Declarer); ok {
		if err := d.Declare(e.ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
			e.t.Fatalf("declare %s: %v", qc.Name, err)
		}
	}
	return qc
}

// publish publishes n messages with event IDs of their own and returns
// the IDs.
func (e *opEnv) publish(n int) []string {
	e.t.Helper()
	tag := fmt.Sprintf("%08x", rand.Uint32())
	msgs := make([]lily.Message, n)
	ids := make([]string, n)
	for i := range msgs {
		ids[i] = fmt.Sprintf("op-%s-%02d", tag, i)
		msgs[i] = lily.Message{EventID: ids[i], Key: fmt.Sprintf("cust-%d", i%3), Type: "order.created",
			Body: fmt.Appendf(nil, `{"order":%d,"tag":%q}`, i, tag), Headers: transport.Headers{"tenant": "acme"}}
	}
	if e.shared && e.h.PublishShared != nil {
		e.h.PublishShared(e.ctx, e.t, e.tr, e.qc.Name, msgs)
	} else if err := lily.Publish(e.ctx, e.tr, e.qc.Name, msgs); err != nil {
		e.t.Fatalf("publish: %v", err)
	}
	e.record(ids...)
	return ids
}

// record adds ids to the published messages.
func (e *opEnv) record(ids ...string) {
	e.mu.Lock()
	e.published = append(e.published, ids...)
	e.mu.Unlock()
}

func (e *opEnv) handle(_ context.Context, d *lily.Delivery) error {
	e.mu.Lock()
	e.redrives[d.EventID] = d.RedriveCount
	e.mu.Unlock()
	if !e.fixed.Load() {
		if e.transient {
			return errNotFixed
		}
		if e.errText != "" {
			return lily.Permanent(errors.New(e.errText))
		}
		return lily.Permanent(errNotFixed)
	}
	return nil
}

func (e *opEnv) observe(_ context.Context, ev lily.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch ev.Kind {
	case lily.EventAcked:
		if e.acked[ev.Queue] == nil {
			e.acked[ev.Queue] = map[string]int{}
		}
		e.acked[ev.Queue][ev.EventID]++
	case lily.EventDeadLettered:
		e.dead[ev.EventID]++
		if ev.Refused != "" {
			e.refused[ev.EventID] = ev.Refused
		}
	}
}

// consume runs a consumer of qc until the returned stop is called (or the
// test ends).
func (e *opEnv) consume(qc lily.QueueConfig) (stop func()) {
	e.t.Helper()
	o := lily.ConsumerOptions{
		Queue: qc, Concurrency: 4, Prefetch: 16, Name: "operator", Version: "v-test",
		Hooks: []lily.Hook{lily.HookFunc(e.observe)}, ReceiveWait: 50 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(newTestWriter(e.t), nil)),
		TracerProvider: e.tp,
	}
	if e.serial {
		o.Concurrency, o.Prefetch, o.SettleBatch = 1, 1, 1
	}
	c, err := lily.NewConsumer(e.tr, lily.HandlerFunc(e.handle), o)
	if err != nil {
		e.t.Fatalf("new consumer: %v", err)
	}
	return Start(e.t, c)
}

// ackedOn counts the distinct event IDs acked on queue.
func (e *opEnv) ackedOn(queue string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.acked[queue])
}

func (e *opEnv) deadCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.dead)
}

// waitAcked waits until n distinct messages were acked on queue.
func (e *opEnv) waitAcked(queue string, n int) {
	e.t.Helper()
	WaitWithin(e.t, waitLimit, fmt.Sprintf("%d messages acked on %s", n, queue), func() (bool, string) {
		got := e.ackedOn(queue)
		return got >= n, fmt.Sprintf("%d acked", got)
	})
}

// deadLetterAll publishes n messages, consumes them while the handler
// fails each permanently, and brings every dead letter into the catalog.
// It returns the event IDs.
func (e *opEnv) deadLetterAll(n int) []string {
	e.t.Helper()
	ids := e.publish(n)
	e.runUntilDead(n)
	e.ingest(e.qc.Name, n)
	return ids
}

// runUntilDead consumes until n messages were dead-lettered; the
// consumer goes on running (consuming), so that a redrive after the fix
// reaches it without a new one joining (a Kafka group's join takes
// seconds).
func (e *opEnv) runUntilDead(n int) {
	e.t.Helper()
	e.consuming()
	WaitWithin(e.t, waitLimit, fmt.Sprintf("%d messages dead-lettered", n), func() (bool, string) {
		got := e.deadCount()
		return got >= n, fmt.Sprintf("%d dead-lettered", got)
	})
}

// consuming returns the stop of the scenario queue's consumer, started
// if none runs.
func (e *opEnv) consuming() (stop func()) {
	e.t.Helper()
	e.mu.Lock()
	running := e.running
	e.mu.Unlock()
	if running == nil {
		running = e.consume(e.qc)
		e.mu.Lock()
		e.running = running
		e.mu.Unlock()
	}
	return running
}

// ingest drains queue's dead-letter destination into the catalog (where a
// broker holds it) until the catalog holds want entries of queue.
func (e *opEnv) ingest(queue string, want int) {
	e.t.Helper()
	d, drains := e.tr.(transport.DeadLetterDrainer)
	WaitWithin(e.t, waitLimit, fmt.Sprintf("%d entries of %s in the catalog", want, queue), func() (bool, string) {
		if drains {
			if _, err := e.cat.Ingest(e.ctx, d, queue); err != nil {
				e.t.Fatalf("ingest %s: %v", queue, err)
			}
		}
		got := len(e.entries(queue))
		return got >= want, fmt.Sprintf("%d entries", got)
	})
}

// tick is a job's Tick: it ingests the queues' dead letters, so that a
// sampled message dead-lettered again reaches the catalog.
func (e *opEnv) tick(ctx context.Context, queues []string) error {
	d, ok := e.tr.(transport.DeadLetterDrainer)
	if !ok {
		return nil
	}
	for _, q := range queues {
		if _, err := e.cat.Ingest(ctx, d, q); err != nil {
			return err
		}
	}
	return nil
}

// entries returns queue's catalog entries by ID.
func (e *opEnv) entries(queue string) []*catalog.Entry {
	e.t.Helper()
	var out []*catalog.Entry
	if err := e.cat.Each(e.ctx, catalog.Filter{Queue: queue}, func(en *catalog.Entry) error {
		out = append(out, en)
		return nil
	}); err != nil {
		e.t.Fatalf("catalog entries of %s: %v", queue, err)
	}
	return out
}

// states counts queue's entries by state.
func (e *opEnv) states(queue string) map[catalog.State]int {
	out := map[catalog.State]int{}
	for _, en := range e.entries(queue) {
		out[en.State]++
	}
	return out
}

// target publishes every redrive through the scenario's transport.
func (e *opEnv) target(context.Context, string) (redrive.Publisher, error) { return e.tr, nil }

// redrivenOnce checks that each of ids was handed back exactly once: one
// entry, redriven, with redrive count 1, and the message acked once on
// queue by a delivery that carried x-lily-redrive-count 1.
func (e *opEnv) redrivenOnce(queue string, ids []string) {
	e.t.Helper()
	byID := map[string][]*catalog.Entry{}
	for _, en := range e.entries(e.qc.Name) {
		byID[en.EventID] = append(byID[en.EventID], en)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		es := byID[id]
		if len(es) != 1 || es[0].State != catalog.StateRedriven || es[0].RedriveCount != 1 {
			var got []string
			for _, en := range es {
				got = append(got, fmt.Sprintf("%s (redrive count %d)", en.State, en.RedriveCount))
			}
			e.t.Errorf("%s: entries %v, want one, redriven once", id, got)
		}
		if n := e.acked[queue][id]; n != 1 {
			e.t.Errorf("%s acked %d times on %s, want once", id, n, queue)
		}
		if n := e.redrives[id]; n != 1 {
			e.t.Errorf("%s: the acked delivery carried redrive count %d, want 1", id, n)
		}
	}
}

// conserve checks conservation at the end of a scenario: every acked
// message was published and acked once; and the ledger of each queue in
// want — waited for until nothing is in flight — equals want's counts
// with nothing lost.
func (e *opEnv) conserve(want ...ledger.Row) {
	e.t.Helper()
	e.mu.Lock()
	known := map[string]bool{}
	for _, id := range e.published {
		known[id] = true
	}
	for q, ids := range e.acked {
		for id, n := range ids {
			if !known[id] {
				e.t.Errorf("conservation: %s acked on %s but never published (invented)", id, q)
			}
			if n != 1 {
				e.t.Errorf("conservation: %s acked %d times on %s, want once", id, n, q)
			}
		}
	}
	e.mu.Unlock()
	ifc, _ := e.tr.(transport.InFlightCounter)
	for _, w := range want {
		var row ledger.Row
		WaitWithin(e.t, waitLimit, "the ledger of "+w.Queue+" to settle", func() (bool, string) {
			rows, err := ledger.New(e.cat).Rows(e.ctx, ifc)
			if err != nil {
				e.t.Fatalf("ledger: %v", err)
			}
			for _, r := range rows {
				if r.Queue == w.Queue {
					row = r
					return r.InFlight == 0, fmt.Sprintf("%+v", r)
				}
			}
			return false, "no row"
		})
		if row.Accepted != w.Accepted || row.Acked != w.Acked || row.DeadLettered != w.DeadLettered || row.Discarded != w.Discarded ||
			row.Redirected != w.Redirected || !row.Balanced() {
			e.t.Errorf("ledger %+v, want accepted %d = acked %d + dead-lettered %d + discarded %d + redirected %d, nothing lost\n%s",
				row, w.Accepted, w.Acked, w.DeadLettered, w.Discarded, w.Redirected, ExplainLedger(e.ctx, e.cat, e.tr, row))
		}
	}
}

// opRedrive dead-letters 8 messages, deploys the fix and redrives them to
// their source: each comes back once to the queue's consumer, keeps its
// event ID and carries redrive count 1; check, when set, runs before the
// conservation check.
func opRedrive(t *testing.T, e *opEnv, check func()) {
	const n = 8
	ids := e.deadLetterAll(n)
	e.fixAndRedriveAll(n)
	e.consumeRedriven(n, ids)
	if check != nil {
		check()
	}
	e.conserve(ledger.Row{Queue: e.qc.Name, Accepted: n, Acked: n})
}

// opRedriveAlone is opRedrive beside another reader of the queue's
// messages (another consumer group, subscription or bound queue): the
// redrive reaches the failing consumer alone, so the other reader sees
// each original exactly once and nothing of the redrive.
func opRedriveAlone(t *testing.T, e *opEnv) {
	drain := e.h.FanOut(e.ctx, t, e.tr, e.qc.Name)
	e.shared = true
	opRedrive(t, e, func() {
		seen := drain()
		e.mu.Lock()
		published := slices.Clone(e.published)
		e.mu.Unlock()
		for _, id := range published {
			if seen[id] != 1 {
				t.Errorf("the other reader got %s %d times, want once: a redrive must reach the failing consumer alone (docs/design.md §9.3)", id, seen[id])
			}
			delete(seen, id)
		}
		for id, k := range seen {
			t.Errorf("the other reader got %s (%d times), never published", id, k)
		}
	})
}

// opRedirect dead-letters 6 messages and redirects them to another queue:
// that queue's consumer acks each once, the source's sees none, and the
// source's ledger counts them redirected, the target's accepted and acked.
func opRedirect(t *testing.T, e *opEnv) {
	const n = 6
	to := e.declare(e.qc.Name+".to", nil)
	ids := e.deadLetterAll(n)
	e.fixed.Store(true)
	res, err := e.rd.Redrive(e.ctx, redrive.Params{Filter: catalog.Filter{Queue: e.qc.Name}, To: to.Name, Actor: "transporttest", Target: e.target})
	if err != nil || res.Redriven != n {
		t.Fatalf("redirect: %+v (%v), want %d redriven", res, err, n)
	}
	stop := e.consume(to)
	e.waitAcked(to.Name, n)
	stop()
	e.redrivenOnce(to.Name, ids)
	if got := e.ackedOn(e.qc.Name); got != 0 {
		t.Errorf("%d messages acked on the source %s, want none: they were redirected", got, e.qc.Name)
	}
	e.conserve(ledger.Row{Queue: e.qc.Name, Accepted: n, Redirected: n}, ledger.Row{Queue: to.Name, Accepted: n, Acked: n})
}

// opRate redrives 15 messages at 100/s: batches of a tenth of a second
// (10, then 5) ask a bucket of a second's worth that starts empty — the
// limit is checked by what the batches ask of the bucket, never by the
// clock.
func opRate(t *testing.T, e *opEnv) {
	const n = 15
	ids := e.deadLetterAll(n)
	e.fixed.Store(true)
	var asks []redrive.RateAsk
	res, err := e.rd.Redrive(e.ctx, redrive.Params{Filter: catalog.Filter{Queue: e.qc.Name}, Rate: 100, Actor: "transporttest", Target: e.target,
		OnRate: func(a redrive.RateAsk) { asks = append(asks, a) }})
	if err != nil || res.Redriven != n {
		t.Fatalf("redrive --rate 100: %+v (%v), want %d redriven", res, err, n)
	}
	if len(asks) != 2 || asks[0].N != 10 || asks[1].N != 5 {
		t.Fatalf("the batches asked the bucket for %+v, want 10 then 5 tokens", asks)
	}
	for _, a := range asks {
		if a.Limit != 100 || a.Burst != 100 {
			t.Errorf("bucket %v/s, burst %d; want 100/s, burst 100", a.Limit, a.Burst)
		}
	}
	if asks[0].Tokens >= float64(asks[0].Burst) {
		t.Errorf("the first batch found a full bucket (%.1f tokens): it must start empty", asks[0].Tokens)
	}
	e.consumeRedriven(n, ids)
	e.conserve(ledger.Row{Queue: e.qc.Name, Accepted: n, Acked: n})
}

// fullDLQRoom is the dlq_max_length of the full-DLQ scenario.
const fullDLQRoom = 2

// opFullDLQ fills a DLQ of dlq_max_length 2 with 2 dead letters, then
// dead-letters 4 more: the 4 (or 3, after one over its length) it refuses go into the catalog directly, marked x-lily-dlq-refused and
// reported by the runtime, the 2 it holds are ingested; after the fix all
// 6 are redriven and acked once.
func opFullDLQ(t *testing.T, e *opEnv) {
	const n, room = 6, fullDLQRoom
	// The DLQ is filled first, and only then do the others fail, one
	// hand-off at a time: a quorum queue's reject-publish is soft (on
	// RabbitMQ 3.10) and takes racing publishes over the limit.
	e.serial = true
	ids := e.publish(room)
	e.runUntilDead(room)
	ids = append(ids, e.publish(n-room)...)
	e.runUntilDead(n)
	e.ingest(e.qc.Name, n)
	e.mu.Lock()
	refused := len(e.refused)
	e.mu.Unlock()
	// A quorum DLQ's reject-publish is soft: it takes one message over
	// its length (RabbitMQ 3.10 to 4.x) before it refuses.
	if refused < n-room-1 || refused > n-room {
		t.Errorf("the runtime reported %d dead letters refused by the full DLQ, want %d (or %d: one over its length)", refused, n-room, n-room-1)
	}
	marked := 0
	for _, en := range e.entries(e.qc.Name) {
		if _, ok := en.Headers[evidence.HeaderDLQRefused]; ok {
			marked++
		}
	}
	if marked != refused {
		t.Errorf("%d entries carry %s, want the %d refused (stored in the catalog because the DLQ was full)", marked, evidence.HeaderDLQRefused, refused)
	}
	e.fixAndRedriveAll(n)
	e.consumeRedriven(n, ids)
	e.conserve(ledger.Row{Queue: e.qc.Name, Accepted: n, Acked: n})
}

// opOversized dead-letters a message whose copy the DLQ refuses as too
// large beside an ordinary one: the big one is stored in the catalog with
// its whole body and the handler's error, and is discarded with a record;
// the other is redriven and acked.
func opOversized(t *testing.T, e *opEnv) {
	e.errText = "permanent: " + strings.Repeat("the whole story of the failure; ", evidence.MaxErrorMessageBytes/32)
	big := e.h.Oversized(e.ctx, t, e.tr, e.qc.Name)
	e.record(big)
	small := e.publish(1)[0]
	e.runUntilDead(2)
	e.ingest(e.qc.Name, 2)
	e.mu.Lock()
	why := e.refused[big]
	_, smallRefused := e.refused[small]
	e.mu.Unlock()
	// The small one may be refused with it: on Kafka, a copy produced in
	// the same batch as a refused one is refused too (docs/design.md §8.4).
	if why == "" {
		t.Errorf("the oversized dead letter %s was not refused by the DLQ (refused: %s %v)", big, small, smallRefused)
	}
	var bigID, smallID int64
	for _, en := range e.entries(e.qc.Name) {
		switch en.EventID {
		case big:
			bigID = en.ID
			if _, ok := en.Headers[evidence.HeaderDLQRefused]; !ok || en.ErrorMessage == "" || len(en.Body) == 0 {
				t.Errorf("oversized entry: %s %v, error %q, %d bytes of body; want the refusal, the error and the body", evidence.HeaderDLQRefused,
					en.Headers[evidence.HeaderDLQRefused], en.ErrorMessage, len(en.Body))
			}
		case small:
			smallID = en.ID
		}
	}
	if bigID == 0 || smallID == 0 {
		t.Fatalf("catalog entries %d (oversized) and %d (small), want both", bigID, smallID)
	}
	dr, err := e.cat.Discard(e.ctx, catalog.DecideParams{Filter: catalog.Filter{IDs: []int64{bigID}}, Reason: "too large to send back; the customer re-submits it", Actor: "transporttest"})
	if err != nil || dr.Count != 1 {
		t.Fatalf("discard of the oversized entry: %+v (%v)", dr, err)
	}
	e.fixAndRedriveAll(1) // the small one; the oversized one was discarded
	e.consumeRedriven(1, []string{small})
	if st := e.states(e.qc.Name); st[catalog.StateDiscarded] != 1 || st[catalog.StateRedriven] != 1 || len(st) != 2 {
		t.Errorf("entry states %v, want one discarded and one redriven", st)
	}
	e.conserve(ledger.Row{Queue: e.qc.Name, Accepted: 2, Acked: 1, Discarded: 1})
}

// fixAndRedriveAll ships the fix and redrives every entry of the queue
// that can be, failing the test unless n were.
func (e *opEnv) fixAndRedriveAll(n int) {
	e.t.Helper()
	e.fixed.Store(true)
	res, err := e.rd.Redrive(e.ctx, redrive.Params{Filter: catalog.Filter{Queue: e.qc.Name}, Actor: "transporttest", Target: e.target})
	if err != nil || res.Redriven != n {
		e.t.Fatalf("redrive: %+v (%v), want %d redriven", res, err, n)
	}
}

// consumeRedriven runs the consumer until n messages of the queue are
// acked, then checks that each of ids was redriven and handled once.
func (e *opEnv) consumeRedriven(n int, ids []string) {
	e.t.Helper()
	stop := e.consuming()
	e.waitAcked(e.qc.Name, n)
	stop()
	e.redrivenOnce(e.qc.Name, ids)
}
