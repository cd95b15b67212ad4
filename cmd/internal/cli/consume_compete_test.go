package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// Competing sidecars: several 'lily consume' processes on one queue, as
// users run them (docs/design.md §11 "real traffic": competing consumers, slow
// handlers, graceful hand-over, a producer below Lily; a run with no crash
// and no fault has handler calls = messages; reconcile in a second
// process).
const (
	competeSidecars    = 3
	competeConcurrency = 4
	// competeMessages are sent in rounds of competeRound: half through
	// lily.Publish, half below Lily.
	competeMessages = 200
	competeRound    = 20
	// competeSlow is the work of every tenth message.
	competeSlow = 300 * time.Millisecond
	// competeStop bounds a sidecar's graceful stop.
	competeStop = 30 * time.Second
)

// competeCall is one handler call as the endpoint saw it.
type competeCall struct {
	sidecar int // the calling process: the URL path /<sidecar>
	eventID string
	count   string // Lily-Delivery-Count
	headers string // Lily-Headers
	body    string
}

// latch is a gate that opens once.
type latch struct {
	ch   chan struct{}
	once sync.Once
}

func newLatch() *latch { return &latch{ch: make(chan struct{})} }

func (l *latch) open() { l.once.Do(func() { close(l.ch) }) }

// wait waits until the latch opens; false when ctx ended first.
func (l *latch) wait(ctx context.Context) bool {
	select {
	case <-l.ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// competeEndpoint is the HTTP handler the sidecars share. It records every
// call and works competeSlow on the slow messages. It holds every call
// until started opens: the test opens it once each sidecar has a call
// running, so that the processes really overlap. For a hand-over it also
// holds sidecar 0's call number holdCall until signalled opens: the test
// sends that sidecar SIGTERM while the call is held and its other handlers
// keep running, acking and receiving. Until that call is held, the other
// sidecars' calls wait on held: on a loaded machine they could otherwise
// drain the queue before sidecar 0 reaches its call holdCall.
type competeEndpoint struct {
	url                      string
	started, signalled, held *latch
	holdCall                 int

	mu      sync.Mutex
	calls   []competeCall
	callsBy [competeSidecars]int // calls so far, by sidecar
	running [competeSidecars]int // calls in progress, by sidecar
	holding bool                 // sidecar 0's call holdCall is held
	done    map[string]bool      // bodies answered
}

// newCompeteEndpoint starts the endpoint; holdCall > 0 holds sidecar 0's
// call of that number until signalled opens.
func newCompeteEndpoint(t *testing.T, holdCall int) *competeEndpoint {
	t.Helper()
	e := &competeEndpoint{started: newLatch(), signalled: newLatch(), held: newLatch(), holdCall: holdCall, done: map[string]bool{}}
	if holdCall == 0 {
		e.held.open()
	}
	srv := httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { // before srv.Close, which waits for the held calls
		e.started.open()
		e.held.open()
		e.signalled.open()
	})
	e.url = srv.URL
	return e
}

func (e *competeEndpoint) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	sidecar, aerr := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
	if err != nil || aerr != nil || sidecar < 0 || sidecar >= competeSidecars {
		http.Error(w, fmt.Sprintf("bad call %s: %v %v", r.URL.Path, err, aerr), http.StatusBadRequest)
		return
	}
	e.mu.Lock()
	e.calls = append(e.calls, competeCall{sidecar: sidecar, eventID: r.Header.Get("Lily-Event-Id"),
		count: r.Header.Get("Lily-Delivery-Count"), headers: r.Header.Get("Lily-Headers"), body: string(body)})
	e.running[sidecar]++
	e.callsBy[sidecar]++
	hold := sidecar == 0 && e.callsBy[sidecar] == e.holdCall
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.running[sidecar]--
		e.done[string(body)] = true
		e.mu.Unlock()
	}()
	if !e.started.wait(r.Context()) {
		return
	}
	if sidecar != 0 && !e.held.wait(r.Context()) {
		return
	}
	if hold {
		e.mu.Lock()
		e.holding = true
		e.mu.Unlock()
		e.held.open()
		if !e.signalled.wait(r.Context()) {
			return
		}
	}
	if strings.Contains(string(body), `"slow":true`) {
		select {
		case <-time.After(competeSlow): // simulates a slow call's work
		case <-r.Context().Done():
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// eachRunning reports whether every sidecar has a call in progress.
func (e *competeEndpoint) eachRunning() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, n := range e.running {
		if n == 0 {
			return false
		}
	}
	return true
}

// isHolding reports whether sidecar 0's call holdCall is held.
func (e *competeEndpoint) isHolding() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.holding
}

// answered reports how many different messages were answered.
func (e *competeEndpoint) answered() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.done)
}

func (e *competeEndpoint) callsCopy() []competeCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]competeCall(nil), e.calls...)
}

// competeQueue is one scenario's queue: its config, its transport in the
// test's process, the catalog file, and the producer below Lily.
type competeQueue struct {
	name, cfg, db string
	pub           sidecarQueue
	// foreign are header values of types Lily's publisher never writes,
	// in the raw client's own types.
	foreign map[string]any
	// raw publishes with the transport's own client, bypassing Lily.
	raw func(msgs []transporttest.ForeignMessage)
}

// newCompeteQueue declares a new queue of kind (the demo's settings, so
// retries and dead letters would show) with its config file.
func newCompeteQueue(t *testing.T, kind string) *competeQueue {
	t.Helper()
	url := ""
	if kind == lily.TransportRabbitMQ {
		url = needRabbit(t)
	}
	q := &competeQueue{name: fmt.Sprintf("compete%08x.created", rand.Uint32()), db: filepath.Join(t.TempDir(), "lily.db")}
	q.cfg = sidecarConfig(t, kind, url, "", q.db, q.name)
	q.pub = openSidecarQueue(t, kind, url, q.db, demo.QueueConfig(q.name, kind, ""))
	switch kind {
	case lily.TransportSQLite:
		// Rows inserted with plain SQL by another program sharing the file
		// (the foreign-producer harness's INSERT).
		db := q.pub.(*sqlite.Transport).DB()
		q.foreign = map[string]any{"x-foreign-nested": map[string]any{"inner": "v", "list": []any{"a", true}}, "x-foreign-bytes": []byte{0, 1, 0xff}}
		q.raw = func(msgs []transporttest.ForeignMessage) {
			transporttest.InsertRaw(context.Background(), t, db, q.name, msgs)
		}
	case lily.TransportRabbitMQ:
		// A plain amqp091 producer: no message_id, an AMQP decimal and a
		// nested table.
		b := newForeignBroker(t, url)
		q.foreign = map[string]any{"x-foreign-decimal": amqp.Decimal{Scale: 2, Value: 1234}, "x-foreign-table": amqp.Table{"inner": "v", "n": int32(7)}}
		q.raw = func(msgs []transporttest.ForeignMessage) {
			for _, m := range msgs {
				b.publish(q.name, amqp.Publishing{Body: m.Body, DeliveryMode: amqp.Persistent, Headers: amqp.Table(m.Headers)})
			}
		}
	default:
		t.Fatalf("no producer below Lily for %s", kind)
	}
	return q
}

// publish sends competeMessages in rounds: half of each through
// lily.Publish, half below Lily without an event ID and with the foreign
// headers. It returns, by body, the event ID Lily's publisher gave ("" for
// a message sent below Lily).
func (q *competeQueue) publish(t *testing.T) map[string]string {
	t.Helper()
	sent := map[string]string{}
	for n := 0; n < competeMessages; n += competeRound {
		var viaLily []lily.Message
		var below []transporttest.ForeignMessage
		for i := n; i < n+competeRound; i++ {
			body := fmt.Sprintf(`{"n":%d,"slow":%t,"queue":%q}`, i, i%10 == 3, q.name)
			if i%2 == 0 {
				viaLily = append(viaLily, lily.Message{Body: []byte(body), Type: "compete"})
			} else {
				below = append(below, transporttest.ForeignMessage{Body: []byte(body), Headers: q.foreign})
				sent[body] = ""
			}
		}
		if err := lily.Publish(context.Background(), q.pub, q.name, viaLily); err != nil {
			t.Fatal(err)
		}
		for _, m := range viaLily {
			sent[string(m.Body)] = m.EventID
		}
		q.raw(below)
	}
	return sent
}

// startSidecars starts the competing 'lily consume' processes, each
// POSTing to its own path of the endpoint; a failed test shows their logs.
func (q *competeQueue) startSidecars(t *testing.T, e *competeEndpoint) []*child {
	t.Helper()
	cs := make([]*child, competeSidecars)
	for i := range cs {
		cs[i] = lilyChild(t, "consume", "--config", q.cfg, "--queue", q.name, "--http", fmt.Sprintf("%s/%d", e.url, i),
			"--concurrency", strconv.Itoa(competeConcurrency), "--name", "compete", "--verbose", "--json")
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("sidecar %d stderr:\n%s", i, cs[i].errb.String())
			}
		})
	}
	return cs
}

// signalStop sends SIGTERM to a sidecar.
func signalStop(t *testing.T, c *child) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
}

// stopped waits for a signalled sidecar's graceful stop: exit 0 and its
// --json summary.
func stopped(t *testing.T, c *child) consumeJSON {
	t.Helper()
	if code := c.exit(t, competeStop); code != 0 {
		t.Fatalf("sidecar exit %d after SIGTERM, want 0\n%s\n%s", code, c.out.String(), c.errb.String())
	}
	var sum consumeJSON
	if err := json.Unmarshal([]byte(c.out.String()), &sum); err != nil {
		t.Fatalf("sidecar --json: %v\n%s", err, c.out.String())
	}
	return sum
}

// competeHoldCall is the call of sidecar 0 during which a hand-over's
// SIGTERM is sent: past its first window, with its handlers busy.
const competeHoldCall = 10

// runCompete runs the scenario on q: the sidecars start, the traffic is
// sent, and the endpoint holds the calls until each sidecar has one
// running. With handOver, sidecar 0 is sent SIGTERM while its call
// competeHoldCall is held and its other handlers run; it stops gracefully
// and the others finish the queue. Once every message was answered the
// remaining sidecars are stopped with SIGTERM, and the outcome is checked
// exactly.
func runCompete(t *testing.T, q *competeQueue, handOver bool) {
	holdCall := 0
	if handOver {
		holdCall = competeHoldCall
	}
	e := newCompeteEndpoint(t, holdCall)
	cs := q.startSidecars(t, e)
	t.Cleanup(func() {
		if t.Failed() {
			e.mu.Lock()
			t.Logf("handler calls by sidecar %v, running %v, %d messages answered", e.callsBy, e.running, len(e.done))
			e.mu.Unlock()
		}
	})
	sent := q.publish(t)
	waittest.For(t, "a handler call running in each sidecar", e.eachRunning)
	e.started.open()
	sums := make([]consumeJSON, len(cs))
	rest := cs
	if handOver {
		waittest.For(t, "sidecar 0 to run its call "+strconv.Itoa(competeHoldCall), e.isHolding)
		signalStop(t, cs[0])
		e.signalled.open()
		sums[0] = stopped(t, cs[0])
		rest = cs[1:]
	}
	waittest.For(t, "every message answered", func() bool { return e.answered() == len(sent) })
	for _, c := range rest {
		signalStop(t, c)
	}
	for i, c := range rest {
		sums[len(cs)-len(rest)+i] = stopped(t, c)
	}
	q.check(t, e.callsCopy(), sent, sums)
}

// check checks a run without a crash or a fault: every message handled
// exactly once, at its first delivery, with its identity (Lily's event
// ID, or a synthetic one and the foreign headers for a message sent below
// Lily); every sidecar's calls acked, nothing retried, released or
// dead-lettered; 'lily reconcile' in a process of its own balanced at
// accepted = acked = competeMessages; the queue empty.
func (q *competeQueue) check(t *testing.T, calls []competeCall, sent map[string]string, sums []consumeJSON) {
	t.Helper()
	byBody := map[string][]competeCall{}
	byID := map[string]competeCall{}
	bySidecar := make([]int64, len(sums))
	for _, c := range calls {
		if c.count != "1" {
			t.Errorf("sidecar %d called the handler for %s (%s) with Lily-Delivery-Count %q, want 1: no crash, every delivery a first one", c.sidecar, c.eventID, c.body, c.count)
		}
		if prev, ok := byID[c.eventID]; ok || c.eventID == "" {
			t.Errorf("event ID %q handed to the handler again: sidecar %d (%s), earlier sidecar %d (%s)", c.eventID, c.sidecar, c.body, prev.sidecar, prev.body)
		}
		byID[c.eventID] = c
		byBody[c.body] = append(byBody[c.body], c)
		bySidecar[c.sidecar]++
	}
	for body, id := range sent {
		cs := byBody[body]
		switch {
		case len(cs) != 1:
			t.Errorf("%s: %d handler calls, want 1", body, len(cs))
		case id != "" && cs[0].eventID != id:
			t.Errorf("%s: handed out as event %s, Lily published it as %s", body, cs[0].eventID, id)
		case id == "" && !strings.Contains(cs[0].headers, "x-foreign-"):
			t.Errorf("%s (sent below Lily): Lily-Headers %s, want its foreign headers", body, cs[0].headers)
		}
	}
	if len(calls) != len(sent) {
		t.Errorf("%d handler calls for %d messages: handler calls = messages", len(calls), len(sent))
	}
	var acked int64
	for i, s := range sums {
		acked += s.Acked
		if s.Acked != bySidecar[i] || s.Retried+s.DeadLettered+s.Released+s.Faults != 0 {
			t.Errorf("sidecar %d: %+v after %d handler calls; want each call acked, nothing retried, dead-lettered, released, no fault", i, s, bySidecar[i])
		}
	}
	if acked != int64(len(sent)) {
		t.Errorf("the sidecars acked %d, want %d", acked, len(sent))
	}
	code, out, errOut := runChild(t, "reconcile", "--config", q.cfg, "--json")
	var rec reconcileJSON
	if err := json.Unmarshal([]byte(out), &rec); code != 0 || err != nil || !rec.Balanced {
		t.Errorf("reconcile (a process of its own) exit %d, %v: %s\n%s", code, err, out, errOut)
	}
	n, found := int64(len(sent)), false
	for _, r := range rec.Queues {
		if r.Queue != q.name {
			continue
		}
		found = true
		if r.Accepted != n || r.Acked != n || r.DeadLettered+r.Discarded+r.InFlight+r.Lost != 0 {
			t.Errorf("reconcile: %+v, want accepted = acked = %d, nothing dead-lettered, discarded, in flight or lost", r, n)
		}
	}
	if !found {
		t.Errorf("reconcile has no row for %s: %s", q.name, out)
	}
	ctx := context.Background()
	if left, err := q.pub.InFlight(ctx, q.name); err != nil || left != 0 {
		t.Errorf("queue %s holds %d messages at the end (%v), want 0", q.name, left, err)
	}
	if dc, ok := q.pub.(transport.DeadLetterCounter); ok {
		if depth, err := dc.DeadLetterDepth(ctx, q.name); err != nil || depth != 0 {
			t.Errorf("dead-letter queue of %s holds %d (%v), want 0", q.name, depth, err)
		}
	}
	cat, err := catalog.Open(ctx, q.db)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if entries, err := cat.List(ctx, catalog.Filter{Queue: q.name}, 10); err != nil || len(entries) != 0 {
		t.Errorf("catalog holds %d dead letters of %s (%v), want none", len(entries), q.name, err)
	}
}

// TestConsumeCompeteSQLite runs three 'lily consume' processes on one
// SQLite queue (one database file), fed half by lily.Publish and half by
// raw INSERTs, with slow handlers, and proves that competing sidecars
// handle every message exactly once, at its first delivery, and ack it:
// reconcile in a process of its own balances at accepted = acked and the
// queue ends empty. "graceful-hand-over" stops one of the three with
// SIGTERM while its handlers run: it finishes them and gives back what no
// handler saw, the others take over, and the outcome is as exact (no
// message handled twice, no delivery counted twice).
func TestConsumeCompeteSQLite(t *testing.T) {
	competeScenarios(t, lily.TransportSQLite)
}

// TestConsumeCompeteRabbitMQ is TestConsumeCompeteSQLite on the broker,
// half the traffic from a plain amqp091 producer (no message_id, foreign
// header types); at the hand-over the stopped sidecar's prefetched window
// must go back uncounted.
func TestConsumeCompeteRabbitMQ(t *testing.T) {
	competeScenarios(t, lily.TransportRabbitMQ)
}

// competeScenarios runs the two competition scenarios on kind, each on a
// queue of its own.
func competeScenarios(t *testing.T, kind string) {
	t.Parallel()
	for _, handOver := range []bool{false, true} {
		name := "three-sidecars"
		if handOver {
			name = "graceful-hand-over"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runCompete(t, newCompeteQueue(t, kind), handOver)
		})
	}
}
