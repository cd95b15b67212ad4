package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
)

// ForeignMessage is a message published below Lily, with the transport's
// own client (raw amqp091, raw franz-go, raw SQL), as another service's
// producer would.
type ForeignMessage struct {
	// Body is the message body.
	Body []byte
	// ID is the producer's own message ID: the AMQP message_id property,
	// the x-lily-event-id header on Kafka (a log has no message ID), the
	// event_id column on SQLite. Empty: the producer sets none.
	ID string
	// Headers are header values in the client's own types (see
	// ForeignHarness.ForeignHeaders).
	Headers map[string]any
}

// ForeignHarness connects the foreign-producer scenarios (docs/design.md §11 "real
// traffic") to one transport.
type ForeignHarness struct {
	// Name is the transport's name in QueueConfig.Transport.
	Name string
	// Open returns, for one subtest, the transport the consumer uses — a
	// broker transport wrapped with ledger.Account, so that the ledger
	// sees what it receives — and its catalog. The scenario closes neither.
	Open func(t *testing.T) (transport.Transport, *catalog.Store)
	// PublishRaw publishes msgs to queue with the transport's own client,
	// bypassing lily.Publish, and returns once the broker confirmed them.
	// tr is the transport Open returned for the scenario.
	PublishRaw func(ctx context.Context, t *testing.T, tr transport.Transport, queue string, msgs []ForeignMessage)
	// Ingest drains queue's dead-letter destination into the catalog. Nil
	// when dead letters go straight into the catalog (SQLite).
	Ingest func(ctx context.Context, tr transport.Transport, cat *catalog.Store, queue string) error
	// ForeignHeaders are header values of types Lily's publisher never
	// writes, in the client's own types (AMQP decimal, unsigned integers,
	// nested tables, byte arrays; binary Kafka header values).
	ForeignHeaders map[string]any
	// SameHeader reports whether got (as Lily read it back: a delivery, a
	// catalog entry) keeps the value and type of sent. Nil: the harness
	// compares with fmt's %T and %v.
	SameHeader func(sent, got any) bool
	// HugeHeader is the size in bytes of one header value that is large
	// but still fits the transport's limits (AMQP: below frame_max).
	HugeHeader int
	// ForgedCount are headers that claim earlier deliveries on a message
	// that was never delivered (a copied x-delivery-count).
	ForgedCount map[string]any
	// Teardown, when set, removes a subtest's queue after it ended.
	Teardown func(ctx context.Context, tr transport.Transport, spec transport.QueueSpec) error
	// Configure, when set, adjusts every queue configuration the scenarios
	// build (as Harness.Configure).
	Configure func(q *lily.QueueConfig)
}

type foreignScenario struct {
	name string
	run  func(t *testing.T, f *foreignEnv)
}

var foreignScenarios = []foreignScenario{
	{"no-event-id/acked", foreignNoIDAcked},
	{"no-event-id-and-shared-ids/dead-lettered", foreignDeadLettered},
	{"shared-id/one-acked-one-dead-lettered", foreignSharedIDMixed},
	{"no-event-id/retry-keeps-identity", foreignRetryKeepsID},
	{"foreign-header-types/acked", foreignHeaderTypesAcked},
	{"foreign-header-types/dead-lettered", foreignHeaderTypesDeadLettered},
	{"huge-headers/acked", foreignHugeAcked},
	{"huge-headers/dead-lettered", foreignHugeDeadLettered},
	{"forged-delivery-count", foreignForgedCount},
}

// RunForeign runs the foreign-producer scenarios as parallel subtests.
// Each publishes below Lily, consumes with the real runtime, and ends with
// the ledger balanced — accepted = acked + dead-lettered + discarded, with
// nothing in flight — counting what the broker holds; with no fault, the
// handler is called once per message.
func RunForeign(t *testing.T, h ForeignHarness) {
	if h.Open == nil || h.PublishRaw == nil {
		t.Fatal("transporttest: ForeignHarness needs Open and PublishRaw")
	}
	for _, sc := range foreignScenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, newForeignEnv(t, h, lily.QueueConfig{}))
		})
	}
}

// foreignEnv is one scenario's world.
type foreignEnv struct {
	t     *testing.T
	h     ForeignHarness
	tr    transport.Transport
	cat   *catalog.Store
	ctx   context.Context
	qc    lily.QueueConfig
	mu    sync.Mutex
	calls map[string]int // body → handler calls
	seen  map[string][]string
	hdrs  map[string]transport.Headers // body → headers of the last delivery
	kinds map[lily.EventKind]int
}

func newForeignEnv(t *testing.T, h ForeignHarness, qc lily.QueueConfig) *foreignEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitLimit)
	t.Cleanup(cancel)
	tr, cat := h.Open(t)
	qc.Name = uniqueQueue(t)
	qc.Transport = h.Name
	if h.Configure != nil {
		h.Configure(&qc)
	}
	qc.Breaker = new(bool)
	qc = qc.WithDefaults()
	if err := qc.Validate(); err != nil {
		t.Fatalf("queue config: %v", err)
	}
	if h.Teardown != nil {
		t.Cleanup(func() {
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
	return &foreignEnv{t: t, h: h, tr: tr, cat: cat, ctx: ctx, qc: qc, calls: map[string]int{},
		seen: map[string][]string{}, hdrs: map[string]transport.Headers{}, kinds: map[lily.EventKind]int{}}
}

// withRetries re-declares the scenario's queue with retry attempts.
func (f *foreignEnv) withRetries(n int) {
	f.t.Helper()
	spec := f.qc
	spec.RetryAttempts = n
	spec.RetryBackoffMillis = new(int64(50))
	spec.MaxRetryBackoffMillis = new(int64(50))
	f.qc = spec.WithDefaults()
	if d, ok := f.tr.(transport.Declarer); ok {
		if err := d.Declare(f.ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{f.qc.Spec()}}); err != nil {
			f.t.Fatalf("declare %s with retries: %v", f.qc.Name, err)
		}
	}
}

// run consumes with handle until done, then stops the consumer.
func (f *foreignEnv) run(handle func(d *lily.Delivery, call int) error, done func() bool) {
	f.t.Helper()
	h := lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		f.mu.Lock()
		b := string(d.Body)
		f.calls[b]++
		call := f.calls[b]
		f.seen[b] = append(f.seen[b], d.EventID)
		f.hdrs[b] = d.Headers
		f.mu.Unlock()
		return handle(d, call)
	})
	hook := lily.HookFunc(func(_ context.Context, ev lily.Event) {
		f.mu.Lock()
		f.kinds[ev.Kind]++
		f.mu.Unlock()
	})
	c, err := lily.NewConsumer(f.tr, h, lily.ConsumerOptions{
		Queue: f.qc, Concurrency: 4, Prefetch: 16, Name: "foreign", Version: "v-test",
		Hooks: []lily.Hook{hook}, ReceiveWait: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(newTestWriter(f.t), nil)),
	})
	if err != nil {
		f.t.Fatalf("new consumer: %v", err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(f.ctx, waitLimit)
	ok, _ := Poll(wctx, func() (bool, string) { return done(), "" })
	wcancel()
	if !ok {
		cancel()
		<-errc
		f.t.Fatalf("gave up after %s: handler calls %v, events %v", waitLimit, f.callsCopy(), f.kindsCopy())
	}
	cancel()
	if err := <-errc; err != nil {
		f.t.Fatalf("consumer run: %v", err)
	}
}

func (f *foreignEnv) kind(k lily.EventKind) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kinds[k]
}

func (f *foreignEnv) callsCopy() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.calls))
	for k, v := range f.calls {
		out[k] = v
	}
	return out
}

func (f *foreignEnv) kindsCopy() map[lily.EventKind]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[lily.EventKind]int, len(f.kinds))
	for k, v := range f.kinds {
		out[k] = v
	}
	return out
}

// oncePerMessage checks that the handler ran exactly once per message.
func (f *foreignEnv) oncePerMessage(msgs []ForeignMessage) {
	f.t.Helper()
	calls := f.callsCopy()
	for _, m := range msgs {
		if n := calls[string(m.Body)]; n != 1 {
			f.t.Errorf("handler called %d times for %.40q, want 1 (no fault: calls = messages)", n, m.Body)
		}
	}
	if len(calls) != len(msgs) {
		f.t.Errorf("handler saw %d distinct bodies, want %d", len(calls), len(msgs))
	}
}

// reconcile ingests the dead letters (where a broker holds them), waits
// until nothing is in flight, and checks the ledger: accepted = acked +
// dead-lettered with the given counts, nothing lost.
func (f *foreignEnv) reconcile(acked, dead int) []*catalog.Entry {
	f.t.Helper()
	ifc, _ := f.tr.(transport.InFlightCounter)
	var row ledger.Row
	WaitFor(f.t, "the ledger of "+f.qc.Name+" to settle", func() bool {
		if f.h.Ingest != nil {
			if err := f.h.Ingest(f.ctx, f.tr, f.cat, f.qc.Name); err != nil {
				f.t.Fatalf("ingest: %v", err)
			}
		}
		rows, err := ledger.New(f.cat).Rows(f.ctx, ifc)
		if err != nil {
			f.t.Fatalf("ledger: %v", err)
		}
		for _, r := range rows {
			if r.Queue == f.qc.Name {
				row = r
				return r.InFlight == 0 && r.Acked+r.DeadLettered >= int64(acked+dead)
			}
		}
		return false
	})
	n := int64(acked + dead)
	if row.Accepted != n || row.Acked != int64(acked) || row.DeadLettered != int64(dead) || row.Lost != 0 {
		f.t.Errorf("ledger %+v, want accepted %d = acked %d + dead-lettered %d, lost 0\n%s", row, n, acked, dead, ExplainLedger(f.ctx, f.cat, f.tr, row))
	}
	var entries []*catalog.Entry
	if err := f.cat.Each(f.ctx, catalog.Filter{Queue: f.qc.Name}, func(e *catalog.Entry) error {
		entries = append(entries, e)
		return nil
	}); err != nil {
		f.t.Fatalf("catalog entries: %v", err)
	}
	if len(entries) != dead {
		f.t.Errorf("catalog holds %d entries of %s, want %d", len(entries), f.qc.Name, dead)
	}
	return entries
}

// sameBodies checks that entries hold exactly the bodies of msgs.
func (f *foreignEnv) sameBodies(entries []*catalog.Entry, msgs []ForeignMessage) {
	f.t.Helper()
	var got, want []string
	for _, e := range entries {
		got = append(got, string(e.Body))
	}
	for _, m := range msgs {
		want = append(want, string(m.Body))
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		f.t.Errorf("catalog bodies %q, want exactly %q", got, want)
	}
}

func foreignBodies(t *testing.T, n int, id string) []ForeignMessage {
	out := make([]ForeignMessage, n)
	for i := range out {
		out[i] = ForeignMessage{Body: []byte(fmt.Sprintf(`{"foreign":%d,"id":%q,"test":%q}`, i, id, t.Name())), ID: id}
	}
	return out
}

var errForeignPermanent = errors.New("foreign: rejected on purpose")

func permanent(*lily.Delivery, int) error { return lily.Permanent(errForeignPermanent) }
func succeed(*lily.Delivery, int) error   { return nil }

// runAcked publishes msgs below Lily and runs a consumer whose handler
// succeeds until each is acked; each must have been handled once.
func (f *foreignEnv) runAcked(t *testing.T, msgs []ForeignMessage) {
	t.Helper()
	f.h.PublishRaw(f.ctx, t, f.tr, f.qc.Name, msgs)
	f.run(succeed, func() bool { return f.kind(lily.EventAcked) >= len(msgs) })
	f.oncePerMessage(msgs)
}

// runDeadLettered publishes msgs below Lily and runs a consumer whose
// handler fails each permanently; each must have been handled once, and
// the ledger must balance with the catalog holding an entry per message
// with its exact body. It returns the entries.
func (f *foreignEnv) runDeadLettered(t *testing.T, msgs []ForeignMessage) []*catalog.Entry {
	t.Helper()
	f.h.PublishRaw(f.ctx, t, f.tr, f.qc.Name, msgs)
	f.run(permanent, func() bool { return f.kind(lily.EventDeadLettered) >= len(msgs) })
	f.oncePerMessage(msgs)
	entries := f.reconcile(0, len(msgs))
	f.sameBodies(entries, msgs)
	return entries
}

// foreignNoIDAcked: messages without any event ID are processed once each,
// get distinct event IDs, and balance the ledger (accepted on receive).
func foreignNoIDAcked(t *testing.T, f *foreignEnv) {
	msgs := foreignBodies(t, 3, "")
	f.runAcked(t, msgs)
	ids := map[string]bool{}
	f.mu.Lock()
	for _, s := range f.seen {
		for _, id := range s {
			if id == "" {
				t.Errorf("a foreign message without ID was handed out with an empty event ID")
			}
			ids[id] = true
		}
	}
	f.mu.Unlock()
	if len(ids) != len(msgs) {
		t.Errorf("%d distinct event IDs for %d different messages without ID: %v", len(ids), len(msgs), ids)
	}
	f.reconcile(len(msgs), 0)
}

// foreignDeadLettered (issue 12 item 1): three different messages without
// an ID and two different ones sharing an ID all fail permanently; the
// catalog must hold five entries with their exact bodies.
func foreignDeadLettered(t *testing.T, f *foreignEnv) {
	msgs := append(foreignBodies(t, 3, ""), foreignBodies(t, 2, "shared-"+f.qc.Name)...)
	entries := f.runDeadLettered(t, msgs)
	f.sameIDs(entries)
}

// sameIDs checks that each entry keeps the event ID its message had when
// the handler saw it (the DLQ copy keeps a synthetic ID too).
func (f *foreignEnv) sameIDs(entries []*catalog.Entry) {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range entries {
		seen := f.seen[string(e.Body)]
		if len(seen) == 0 || seen[len(seen)-1] != e.EventID {
			f.t.Errorf("entry %.40q has event ID %s, the handler saw %v", e.Body, e.EventID, seen)
		}
	}
}

// foreignSharedIDMixed: two different bodies under one ID, one acked and
// one dead-lettered, are two messages to the ledger.
func foreignSharedIDMixed(t *testing.T, f *foreignEnv) {
	msgs := foreignBodies(t, 2, "mixed-"+f.qc.Name)
	f.h.PublishRaw(f.ctx, t, f.tr, f.qc.Name, msgs)
	f.run(func(d *lily.Delivery, _ int) error {
		if bytes.Equal(d.Body, msgs[1].Body) {
			return lily.Permanent(errForeignPermanent)
		}
		return nil
	}, func() bool { return f.kind(lily.EventAcked)+f.kind(lily.EventDeadLettered) >= 2 })
	f.oncePerMessage(msgs)
	entries := f.reconcile(1, 1)
	f.sameBodies(entries, msgs[1:])
}

// foreignRetryKeepsID: a message without ID fails transiently once; the
// copy back from its retry bucket has the same event ID, and the message
// counts once.
func foreignRetryKeepsID(t *testing.T, f *foreignEnv) {
	f.withRetries(2)
	msgs := foreignBodies(t, 2, "")
	f.h.PublishRaw(f.ctx, t, f.tr, f.qc.Name, msgs)
	f.run(func(_ *lily.Delivery, call int) error {
		if call == 1 {
			return errors.New("transient on purpose")
		}
		return nil
	}, func() bool { return f.kind(lily.EventAcked) >= len(msgs) })
	f.mu.Lock()
	for b, ids := range f.seen {
		if len(ids) != 2 || ids[0] != ids[1] || ids[0] == "" {
			t.Errorf("message %.40q had event IDs %v over its first delivery and its retry, want one stable ID", b, ids)
		}
	}
	f.mu.Unlock()
	f.reconcile(len(msgs), 0)
}

func (f *foreignEnv) sameHeader(sent, got any) bool {
	if f.h.SameHeader != nil {
		return f.h.SameHeader(sent, got)
	}
	return fmt.Sprintf("%T %v", sent, sent) == fmt.Sprintf("%T %v", got, got)
}

// checkHeaders reports the foreign header values that did not survive.
func (f *foreignEnv) checkHeaders(where string, got transport.Headers) {
	f.t.Helper()
	for k, v := range f.h.ForeignHeaders {
		g, ok := got[k]
		if !ok {
			f.t.Errorf("%s: header %s missing", where, k)
			continue
		}
		if !f.sameHeader(v, g) {
			f.t.Errorf("%s: header %s = %T %v, sent %T %v (values keep their types, docs/design.md §7)", where, k, g, g, v, v)
		}
	}
}

func (f *foreignEnv) foreignHeaderMessages(t *testing.T) []ForeignMessage {
	if len(f.h.ForeignHeaders) == 0 {
		t.Fatalf("ForeignHarness.ForeignHeaders is empty for %s: give the client's own header types", f.h.Name)
	}
	msgs := foreignBodies(t, 2, "")
	for i := range msgs {
		msgs[i].Headers = f.h.ForeignHeaders
	}
	return msgs
}

// foreignHeaderTypesAcked: foreign header types reach the handler intact
// and the messages are acked once each.
func foreignHeaderTypesAcked(t *testing.T, f *foreignEnv) {
	msgs := f.foreignHeaderMessages(t)
	f.runAcked(t, msgs)
	f.mu.Lock()
	hdrs := f.hdrs[string(msgs[0].Body)]
	f.mu.Unlock()
	f.checkHeaders("delivery", hdrs)
	f.reconcile(len(msgs), 0)
}

// foreignHeaderTypesDeadLettered: foreign header types survive the
// dead-letter copy into the catalog.
func foreignHeaderTypesDeadLettered(t *testing.T, f *foreignEnv) {
	msgs := f.foreignHeaderMessages(t)
	entries := f.runDeadLettered(t, msgs)
	for _, e := range entries {
		f.checkHeaders("catalog entry "+e.EventID, e.Headers)
	}
}

func (f *foreignEnv) hugeMessages(t *testing.T) []ForeignMessage {
	if f.h.HugeHeader <= 0 {
		t.Fatalf("ForeignHarness.HugeHeader is unset for %s", f.h.Name)
	}
	msgs := foreignBodies(t, 2, "")
	for i := range msgs {
		msgs[i].Headers = map[string]any{"x-foreign-huge": strings.Repeat("h", f.h.HugeHeader)}
	}
	return msgs
}

// foreignHugeAcked: a header near the transport's limit is processed.
func foreignHugeAcked(t *testing.T, f *foreignEnv) {
	msgs := f.hugeMessages(t)
	f.runAcked(t, msgs)
	f.reconcile(len(msgs), 0)
}

// foreignHugeDeadLettered: a header near the limit, plus Lily's evidence,
// must not break the hand-off: the dead letters arrive with the original
// header whole, the handler ran once each.
func foreignHugeDeadLettered(t *testing.T, f *foreignEnv) {
	msgs := f.hugeMessages(t)
	entries := f.runDeadLettered(t, msgs)
	for _, e := range entries {
		var n int
		switch v := e.Headers["x-foreign-huge"].(type) {
		case string:
			n = len(v)
		case []byte:
			n = len(v)
		}
		if n != f.h.HugeHeader {
			t.Errorf("entry %s: the original huge header has %d bytes, want %d (never truncate the original headers)", e.EventID, n, f.h.HugeHeader)
		}
	}
}

// foreignForgedCount: a first delivery that carries a forged or copied
// delivery count is handled (not dead-lettered at the delivery limit).
func foreignForgedCount(t *testing.T, f *foreignEnv) {
	if len(f.h.ForgedCount) == 0 {
		t.Fatalf("ForeignHarness.ForgedCount is empty for %s", f.h.Name)
	}
	msgs := foreignBodies(t, 2, "")
	for i := range msgs {
		msgs[i].Headers = f.h.ForgedCount
	}
	f.h.PublishRaw(f.ctx, t, f.tr, f.qc.Name, msgs)
	f.run(succeed, func() bool { return f.kind(lily.EventAcked)+f.kind(lily.EventDeadLettered) >= len(msgs) })
	f.oncePerMessage(msgs)
	f.reconcile(len(msgs), 0)
}
