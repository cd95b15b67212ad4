package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

func testDeliveryLimit(t *testing.T, h Harness) {
	const limit = 3
	e := newEnv(t, h, lily.QueueConfig{DeliveryLimit: new(limit)})
	id := e.publish(transport.Message{Body: []byte("kills its consumer")})[0]
	// Consumers that die holding the message: each takes it and vanishes.
	for i := 1; i <= limit; i++ {
		doomed := fmt.Sprintf("doomed-%d", i)
		var ds []*transport.Delivery
		e.waitFor("the message to be redelivered", func() bool {
			var err error
			ds, err = e.tr.Receive(e.ctx, &transport.ReceiveParams{Queue: e.queue, Max: 1, Wait: 100 * time.Millisecond, Consumer: doomed})
			if err != nil {
				t.Fatalf("receive: %v", err)
			}
			return len(ds) == 1
		})
		if ds[0].EventID != id || ds[0].DeliveryCount != i {
			t.Fatalf("delivery %d: event %s count %d, want %s count %d", i, ds[0].EventID, ds[0].DeliveryCount, id, i)
		}
		if err := h.Abandon(e.ctx, e.tr, doomed); err != nil {
			t.Fatalf("abandon: %v", err)
		}
	}
	if f, ok := e.base.(transport.Featurer); ok && f.Features().BrokerDeliveryLimit {
		// The broker dead-letters at the limit by itself; the runtime
		// never sees the message again, and the evidence is the broker's.
		e.waitFor("the broker to dead-letter the message", func() bool { _, ok := e.deadLetters()[id]; return ok })
		dl := e.deadLetters()[id]
		if dl.Reason != string(evidence.ReasonDeliveryLimit) {
			t.Errorf("broker dead-letter reason %q, want %q", dl.Reason, evidence.ReasonDeliveryLimit)
		}
		if !bytes.Equal(dl.Body, []byte("kills its consumer")) {
			t.Errorf("dead-letter body %q changed", dl.Body)
		}
		e.conserve(0)
		return
	}
	e.consume(lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		e.called(d)
		return nil
	}), e.allTerminal)
	if got := e.callsOf(id); got != 0 {
		t.Errorf("handler called %d times past the delivery limit, want 0", got)
	}
	dl, ok := e.deadLetters()[id]
	if !ok {
		t.Fatalf("message %s not dead-lettered at the delivery limit", id)
	}
	checkEvidence(t, dl, evidence.ReasonDeliveryLimit, "", 0)
	if rec, _ := evidence.Decode(dl.Headers); rec.DeliveryCount != limit+1 {
		t.Errorf("evidence delivery count %d, want %d", rec.DeliveryCount, limit+1)
	}
	e.conserve(0)
}

func testInvalidRetryCount(t *testing.T, h Harness) {
	e := newEnv(t, h, lily.QueueConfig{RetryAttempts: 3})
	// Only int32 (AMQP long-int) is canonical, on every transport: other
	// integer types are refused however small their value (001_*).
	bad := map[string]any{
		"string": "0", "negative": int32(-1), "over": int32(101), "float": float64(3), "bool": true,
		"int8": int8(1), "int16": int16(2), "int64": int64(2),
	}
	good := map[string]any{"absent": nil, "zero": int32(0), "two": int32(2), "hundred": int32(100)}
	names := map[string]string{}
	var raws = map[string]any{}
	for name, v := range bad {
		id := e.publish(transport.Message{Body: []byte(name), Headers: transport.Headers{evidence.HeaderRetryCount: v}})[0]
		names[id] = name
		raws[id] = v
	}
	for name, v := range good {
		m := transport.Message{Body: []byte(name)}
		if v != nil {
			m.Headers = transport.Headers{evidence.HeaderRetryCount: v}
		}
		names[e.publish(m)[0]] = name
	}
	e.consume(lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		e.called(d)
		return nil
	}), e.allTerminal)
	dls := e.deadLetters()
	for id, name := range names {
		_, isBad := bad[name]
		dl, dead := dls[id]
		switch {
		case isBad && !dead:
			t.Errorf("x-retry-count %s (%#v) was accepted, want dead-lettered invalid_retry_count", name, bad[name])
		case isBad:
			if e.callsOf(id) != 0 {
				t.Errorf("handler called for non-canonical x-retry-count %s", name)
			}
			checkEvidence(t, dl, evidence.ReasonInvalidRetryCount, "", 0)
			rec, _ := evidence.Decode(dl.Headers)
			if rec.RawRetryCount != evidence.FormatRaw(raws[id]) {
				t.Errorf("raw retry count %q in evidence, want %q", rec.RawRetryCount, evidence.FormatRaw(raws[id]))
			}
			if got := dl.Headers[evidence.HeaderRetryCount]; got != raws[id] {
				t.Errorf("x-retry-count rewritten to %#v, want the raw %#v kept (never silently reset)", got, raws[id])
			}
		case dead:
			t.Errorf("canonical x-retry-count %s dead-lettered (%s)", name, dl.Reason)
		}
	}
	e.conserve(0)
}

func testPanic(t *testing.T, h Harness) {
	e := newEnv(t, h, lily.QueueConfig{})
	id := e.publish(transport.Message{Body: []byte("nil map")})[0]
	e.consume(lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		e.called(d)
		var m map[string]int
		m["boom"]++ // panics: assignment to entry in nil map
		return nil
	}), e.allTerminal)
	dl, ok := e.deadLetters()[id]
	if !ok {
		t.Fatalf("panicking message %s not dead-lettered", id)
	}
	checkEvidence(t, dl, evidence.ReasonRetriesExhausted, "*lily.PanicError", 0)
	rec, _ := evidence.Decode(dl.Headers)
	if !strings.Contains(rec.ErrorStack, "goroutine") || len(rec.ErrorStack) > evidence.MaxErrorStackBytes {
		t.Errorf("panic stack missing or over %d bytes: %d bytes", evidence.MaxErrorStackBytes, len(rec.ErrorStack))
	}
	if e.count(lily.EventFault) != 1 {
		t.Errorf("fault events %d, want 1", e.count(lily.EventFault))
	}
	e.conserve(0)
}

func testHandlerTimeout(t *testing.T, h Harness) {
	e := newEnv(t, h, lily.QueueConfig{HandlerTimeoutMillis: new(int64(50))})
	id := e.publish(transport.Message{Body: []byte("slow")})[0]
	e.consume(lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		e.called(d)
		<-ctx.Done()
		return ctx.Err()
	}), e.allTerminal)
	dl, ok := e.deadLetters()[id]
	if !ok {
		t.Fatalf("timed-out message %s not dead-lettered", id)
	}
	checkEvidence(t, dl, evidence.ReasonRetriesExhausted, "*lily.TimeoutError", 0)
	e.conserve(0)
}

// testAbandoned: a handler that ignores its context is abandoned after its
// timeout and grace, and its delivery is handled as a transient failure —
// retried through a bucket as a new copy (delivery count 1 again), never
// released (which raises the count toward delivery_limit).
func testAbandoned(t *testing.T, h Harness) {
	e := newEnv(t, h, lily.QueueConfig{HandlerTimeoutMillis: new(int64(50)), RetryAttempts: 1, RetryBackoffMillis: new(int64(20))})
	id := e.publish(transport.Message{Body: []byte("stuck")})[0]
	release := make(chan struct{})
	defer close(release)
	var counts, retries []int
	e.consume(lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		n := e.called(d)
		e.mu.Lock()
		counts, retries = append(counts, d.DeliveryCount), append(retries, d.RetryCount)
		e.mu.Unlock()
		if n == 1 {
			<-release // ignores its context: abandoned after the grace
		}
		return nil
	}), e.allTerminal, func(o *lily.ConsumerOptions) { o.AbandonGrace = 50 * time.Millisecond })
	if e.count(lily.EventReleased) != 0 || e.count(lily.EventRetried) != 1 || e.count(lily.EventAcked) != 1 {
		t.Errorf("released %d retried %d acked %d, want 0, 1 and 1", e.count(lily.EventReleased), e.count(lily.EventRetried), e.count(lily.EventAcked))
	}
	if e.count(lily.EventAbandoned) < 1 {
		t.Errorf("abandoned events %d, want at least 1", e.count(lily.EventAbandoned))
	}
	if !slices.Equal(counts, []int{1, 1}) || !slices.Equal(retries, []int{0, 1}) {
		t.Errorf("delivery counts %v retry counts %v, want [1 1] and [0 1]: an abandonment spends a retry, not a delivery", counts, retries)
	}
	if e.callsOf(id) != 2 {
		t.Errorf("calls %d, want 2", e.callsOf(id))
	}
	e.conserve(0)
}

// handOffFails checks that a hand-off whose confirm fails leaves the
// original unacknowledged and in place, then completes on redelivery.
func handOffFails(t *testing.T, h Harness, action transport.Action, qc lily.QueueConfig, handler func(*env) lily.Handler) {
	e := newEnv(t, h, qc)
	faulty := NewFaulty(e.tr)
	faulty.FailSettle(action, 1, nil)
	id := e.publish(transport.Message{Body: []byte("hand-off")})[0]
	var checked atomic.Bool
	check := lily.HookFunc(func(ctx context.Context, ev lily.Event) {
		if ev.Kind != lily.EventSettleFailed || checked.Swap(true) {
			return
		}
		if !errors.Is(ev.Err, ErrInjected) {
			t.Errorf("settle failure %v, want the injected fault", ev.Err)
		}
		if _, dead := e.deadLetters()[id]; dead {
			t.Error("copy present although its hand-off failed")
		}
		if n, ok := h.inFlight(ctx, t, e.base, e.queue); ok && n != 1 {
			t.Errorf("after a failed %s hand-off %d messages in flight, want the original (1)", action, n)
		}
	})
	e.tr = faulty
	e.consume(handler(e), e.allTerminal, func(o *lily.ConsumerOptions) { o.Hooks = append(o.Hooks, check) })
	if !checked.Load() {
		t.Fatal("the injected settle failure was never reported")
	}
	e.conserve(0)
}

func testDeadLetterHandOffFails(t *testing.T, h Harness) {
	handOffFails(t, h, transport.DeadLetter, lily.QueueConfig{}, func(e *env) lily.Handler {
		return lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
			e.called(d)
			return lily.Permanent(errors.New("bad data"))
		})
	})
}

func testRetryHandOffFails(t *testing.T, h Harness) {
	handOffFails(t, h, transport.Retry, lily.QueueConfig{RetryAttempts: 1, RetryBackoffMillis: new(int64(20))}, func(e *env) lily.Handler {
		return lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
			if e.called(d) == 1 || d.RetryCount == 0 {
				return errors.New("transient")
			}
			return nil
		})
	})
}

func testFailedPublish(t *testing.T, h Harness) {
	e := newEnv(t, h, lily.QueueConfig{})
	faulty := NewFaulty(e.tr)
	faulty.FailPublish(1, nil)
	err := lily.Publish(e.ctx, faulty, e.queue, []transport.Message{{Body: []byte("lost?")}})
	if !errors.Is(err, ErrInjected) {
		t.Fatalf("publish error %v, want the injected fault", err)
	}
	if err := lily.Publish(e.ctx, faulty, e.queue, []transport.Message{{EventID: "after-the-fault", Body: []byte("x")}}); err != nil {
		t.Fatalf("publish after the fault: %v", err)
	}
	e.mu.Lock()
	e.published = append(e.published, "after-the-fault")
	e.mu.Unlock()
	e.conserve(1) // only the confirmed publish is held
	if err := lily.Publish(e.ctx, e.tr, e.queue+".does-not-exist", []transport.Message{{Body: []byte("x")}}); err == nil {
		t.Error("publish to an undeclared queue succeeded, want an unroutable error")
	}
}

func testConnectionLost(t *testing.T, h Harness) {
	e := newEnv(t, h, lily.QueueConfig{})
	e.publish(bodies(10, "conn")...)
	faulty := NewFaulty(e.tr)
	faulty.Disconnect(3)
	e.tr = faulty
	e.consume(lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		e.called(d)
		return nil
	}), e.allTerminal)
	if e.count(lily.EventAcked) != 10 {
		t.Errorf("acked %d, want 10", e.count(lily.EventAcked))
	}
	e.conserve(0)
}

func testRedriveRoundTrip(t *testing.T, h Harness) {
	e := newEnv(t, h, lily.QueueConfig{})
	orig := transport.Headers{"tenant": "acme"}
	id := e.publish(transport.Message{Body: []byte("needs a fix"), Key: "k1", Headers: orig})[0]
	var fixed atomic.Bool
	var redriven atomic.Pointer[lily.Delivery]
	handler := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		e.called(d)
		if !fixed.Load() {
			return lily.Permanent(errors.New("bug in the handler"))
		}
		redriven.Store(d)
		return nil
	})
	e.consume(handler, e.allTerminal)
	dl := e.deadLetter(id)
	fixed.Store(true)
	msg := transport.Message{EventID: dl.EventID, Key: dl.Key, Type: dl.Type, Body: dl.Body, Headers: evidence.RedriveHeaders(dl.Headers)}
	if err := e.tr.Publish(e.ctx, &transport.PublishParams{Queue: dl.Queue, Messages: []transport.Message{msg}}); err != nil {
		t.Fatalf("redrive publish: %v", err)
	}
	e.consume(handler, func() bool { return redriven.Load() != nil && e.count(lily.EventAcked) == 1 })
	d := redriven.Load()
	if d.EventID != id || string(d.Body) != "needs a fix" || d.Key != "k1" {
		t.Errorf("redriven delivery %s %q key %q, want %s with the original body and key", d.EventID, d.Body, d.Key, id)
	}
	if d.RedriveCount != 1 || d.RetryCount != 0 {
		t.Errorf("redriven counts redrive=%d retry=%d, want 1 and 0", d.RedriveCount, d.RetryCount)
	}
	want := maps.Clone(orig)
	for k, v := range want {
		if d.Headers[k] != v {
			t.Errorf("redriven header %s = %v, want %v", k, d.Headers[k], v)
		}
	}
	if _, stale := d.Headers[evidence.HeaderReason]; stale {
		t.Error("redriven message still carries the old dead-letter reason")
	}
	e.conserve(0)
}

func testMixedWorkload(t *testing.T, h Harness) {
	e := newEnv(t, h, lily.QueueConfig{RetryAttempts: 2, RetryBackoffMillis: new(int64(10)), MaxRetryBackoffMillis: new(int64(20)), RetryJitterRatio: 0.2})
	ids := e.publish(bodies(300, "mixed")...)
	kind := map[string]int{}
	for i, id := range ids {
		kind[id] = i % 10 // 0: permanent, 1: flaky (ok on 2nd), 2: hopeless, rest ok
	}
	e.consume(lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		n := e.called(d)
		switch kind[d.EventID] {
		case 0:
			return lily.Permanent(errors.New("malformed"))
		case 1:
			if n < 2 {
				return errors.New("flaky")
			}
		case 2:
			return errors.New("hopeless")
		}
		return nil
	}), e.allTerminal, func(o *lily.ConsumerOptions) { o.Concurrency = 8; o.Prefetch = 64 })
	dls := e.deadLetters()
	for id, k := range kind {
		dl, dead := dls[id]
		switch {
		case k == 0 && (!dead || dl.Reason != string(evidence.ReasonPermanent)):
			t.Errorf("%s: permanent message not dead-lettered as permanent", id)
		case k == 2 && (!dead || dl.Reason != string(evidence.ReasonRetriesExhausted)):
			t.Errorf("%s: hopeless message not dead-lettered as retries_exhausted", id)
		case k != 0 && k != 2 && dead:
			t.Errorf("%s: healthy or flaky message dead-lettered (%s)", id, dl.Reason)
		}
	}
	if len(dls) != 60 || e.count(lily.EventAcked) != 240 {
		t.Errorf("dead letters %d acked %d, want 60 and 240", len(dls), e.count(lily.EventAcked))
	}
	e.conserve(0)
}
