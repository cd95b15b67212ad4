package transporttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

var behaviours = []behaviour{
	{"Ack", testAck},
	{"DelayHonoured", testDelayHonoured},
	{"RetriesExhausted", testRetriesExhausted},
	{"Permanent", testPermanent},
	{"PermanentAllowList", testPermanentAllowList},
	{"DecodeErrorPermanentByDefault", testDecodeErrorPermanentByDefault},
	{"ImmediateRetries", testImmediateRetries},
	{"DeliveryLimit", testDeliveryLimit},
	{"InvalidRetryCount", testInvalidRetryCount},
	{"Panic", testPanic},
	{"HandlerTimeout", testHandlerTimeout},
	{"AbandonedHandlerRetried", testAbandoned},
	{"DeadLetterHandOffFails", testDeadLetterHandOffFails},
	{"RetryHandOffFails", testRetryHandOffFails},
	{"FailedPublish", testFailedPublish},
	{"ConnectionLost", testConnectionLost},
	{"RedriveRoundTrip", testRedriveRoundTrip},
	{"MixedWorkload", testMixedWorkload},
}

// dbError is a transient error type of the tests, named in evidence.
type dbError struct{ msg string }

func (e *dbError) Error() string { return e.msg }

func testAck(t *testing.T, h Harness) {
	e := newEnv(t, h, lily.QueueConfig{})
	msgs := bodies(20, "ack")
	for i := range msgs {
		msgs[i].Key = fmt.Sprintf("k%d", i%3)
		msgs[i].Type = "test.ack"
		msgs[i].Headers = transport.Headers{"tenant": "acme", "n": int32(i), "flag": true, "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	}
	ids := e.publish(msgs...)
	byID := map[string]transport.Message{}
	for i, id := range ids {
		byID[id] = msgs[i]
	}
	var bad sync.Map
	e.consume(lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		e.called(d)
		want := byID[d.EventID]
		switch {
		case !bytes.Equal(d.Body, want.Body):
			bad.Store(d.EventID, fmt.Sprintf("body %q, want %q", d.Body, want.Body))
		case d.DeliveryCount != 1 || d.RetryCount != 0 || d.RedriveCount != 0:
			bad.Store(d.EventID, fmt.Sprintf("counts delivery=%d retry=%d redrive=%d, want 1 0 0", d.DeliveryCount, d.RetryCount, d.RedriveCount))
		case d.Key != want.Key || d.Type != want.Type:
			bad.Store(d.EventID, fmt.Sprintf("key/type %q/%q, want %q/%q", d.Key, d.Type, want.Key, want.Type))
		}
		for k, v := range want.Headers {
			if !reflect.DeepEqual(d.Headers[k], v) {
				bad.Store(d.EventID, fmt.Sprintf("header %s = %#v, want %#v", k, d.Headers[k], v))
			}
		}
		return nil
	}), e.allTerminal)
	bad.Range(func(k, v any) bool { t.Errorf("delivery %s: %s", k, v); return true })
	if n := e.count(lily.EventAcked); n != len(ids) {
		t.Errorf("acked %d, want %d", n, len(ids))
	}
	if dls := e.deadLetters(); len(dls) != 0 {
		t.Errorf("%d dead letters, want 0", len(dls))
	}
	e.conserve(0)
}

func testDelayHonoured(t *testing.T, h Harness) {
	const delay = 300 * time.Millisecond
	e := newEnv(t, h, lily.QueueConfig{RetryAttempts: 1, RetryBackoffMillis: new(delay.Milliseconds())})
	id := e.publish(transport.Message{Body: []byte("later")})[0]
	var mu sync.Mutex
	var failedAt, retriedAt time.Time
	e.consume(lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if e.called(d) == 1 {
			failedAt = time.Now()
			return errors.New("not yet")
		}
		retriedAt = time.Now()
		if d.RetryCount != 1 {
			t.Errorf("retry count %d on the retried copy, want 1", d.RetryCount)
		}
		if d.DeliveryCount != 1 {
			t.Errorf("delivery count %d on the retried copy, want 1 (a new copy)", d.DeliveryCount)
		}
		return nil
	}), e.allTerminal)
	if got := e.callsOf(id); got != 2 {
		t.Fatalf("handler called %d times, want 2", got)
	}
	// The bucket's delay starts when the copy is handed over, after the
	// handler returned; 2ms tolerance for millisecond clock granularity.
	if gap := retriedAt.Sub(failedAt); gap < delay-2*time.Millisecond {
		t.Errorf("retried %s after the failure, before its %s delay was due", gap, delay)
	}
	if e.count(lily.EventRetried) != 1 {
		t.Errorf("retried events %d, want 1", e.count(lily.EventRetried))
	}
	e.conserve(0)
}

func testRetriesExhausted(t *testing.T, h Harness) {
	e := newEnv(t, h, lily.QueueConfig{RetryAttempts: 2, RetryBackoffMillis: new(int64(20)), MaxRetryBackoffMillis: new(int64(40))})
	body := []byte{0xff, 0xfe, 0x00, 'o', 'r', 'd', 'e', 'r', 0x80}
	orig := transport.Headers{"tenant": "acme", "priority": int32(7), "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	id := e.publish(transport.Message{Body: body, Key: "cust-1", Type: "order.created", Headers: orig})[0]
	e.consume(lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		n := e.called(d)
		if d.RetryCount != n-1 {
			t.Errorf("call %d: retry count %d, want %d", n, d.RetryCount, n-1)
		}
		return &dbError{msg: fmt.Sprintf("insert order (call %d): connection refused to postgres://app:hunter2@db:5432/orders", n)}
	}), e.allTerminal)
	if got := e.callsOf(id); got != 3 {
		t.Errorf("handler called %d times, want 3 (first processing + 2 retries)", got)
	}
	dl := e.deadLetter(id)
	if !bytes.Equal(dl.Body, body) {
		t.Errorf("dead-letter body %x, want byte-identical %x", dl.Body, body)
	}
	if dl.Key != "cust-1" || dl.Type != "order.created" {
		t.Errorf("dead letter key/type %q/%q, want cust-1/order.created", dl.Key, dl.Type)
	}
	for k, v := range orig {
		if !reflect.DeepEqual(dl.Headers[k], v) {
			t.Errorf("original header %s = %#v in the dead letter, want %#v untouched", k, dl.Headers[k], v)
		}
	}
	checkEvidence(t, dl, evidence.ReasonRetriesExhausted, "*transporttest.dbError", 2)
	rec, _ := evidence.Decode(dl.Headers)
	if strings.Contains(rec.ErrorMessage, "hunter2") {
		t.Errorf("error message not redacted: %q", rec.ErrorMessage)
	}
	if !strings.Contains(rec.ErrorMessage, "connection refused") {
		t.Errorf("error message %q lost its content", rec.ErrorMessage)
	}
	if rec.FirstFailureAt.After(rec.LastFailureAt) || rec.LastFailureAt.After(rec.DeadLetteredAt) {
		t.Errorf("failure times out of order: first %v last %v dead-lettered %v", rec.FirstFailureAt, rec.LastFailureAt, rec.DeadLetteredAt)
	}
	if e.count(lily.EventRetried) != 2 {
		t.Errorf("retried events %d, want 2", e.count(lily.EventRetried))
	}
	checkAttempts(t, dl, rec)
	e.conserve(0)
}

// checkAttempts checks the attempt history (x-lily-attempts) of
// testRetriesExhausted's dead letter: each of the three calls, in order,
// with the retry count of its delivery, its outcome and its own error,
// redacted; the last at the record's last failure.
func checkAttempts(t *testing.T, dl DeadLetter, rec evidence.Record) {
	t.Helper()
	hist, err := evidence.DecodeAttempts(dl.Headers)
	if err != nil || len(hist.Attempts) != 3 || hist.Dropped != 0 {
		t.Fatalf("attempt history %+v (%v), want the 3 calls", hist, err)
	}
	for i, a := range hist.Attempts {
		outcome := evidence.OutcomeRetry
		if i == 2 {
			outcome = evidence.OutcomeDeadLetter
		}
		want := fmt.Sprintf("insert order (call %d): connection refused to postgres://app:***@db:5432/orders", i+1)
		if a.RetryCount != i || a.Outcome != outcome || a.ErrorType != "*transporttest.dbError" || a.ErrorMessage != want ||
			(i > 0 && a.At.Before(hist.Attempts[i-1].At)) {
			t.Errorf("attempt %d = %+v; want retry %d, %s, %q", i, a, i, outcome, want)
		}
	}
	if !hist.Attempts[0].At.Equal(rec.FirstFailureAt) || !hist.Attempts[2].At.Equal(rec.LastFailureAt) {
		t.Errorf("attempts from %v to %v, the record's failures from %v to %v", hist.Attempts[0].At, hist.Attempts[2].At, rec.FirstFailureAt, rec.LastFailureAt)
	}
}

// checkEvidence checks the evidence every dead letter must carry.
func checkEvidence(t *testing.T, dl DeadLetter, reason evidence.Reason, errType string, retries int) {
	t.Helper()
	rec, err := evidence.Decode(dl.Headers)
	if err != nil {
		t.Errorf("evidence of %s does not decode: %v", dl.EventID, err)
	}
	if dl.Reason != string(reason) || rec.Reason != reason {
		t.Errorf("reason %q (header %q), want %q", dl.Reason, rec.Reason, reason)
	}
	if errType != "" && rec.ErrorType != errType {
		t.Errorf("error type %q, want %q", rec.ErrorType, errType)
	}
	if rec.ErrorMessage == "" {
		t.Error("no error message in the evidence")
	}
	if !strings.HasSuffix(rec.Source, "/"+dl.Queue) {
		t.Errorf("source %q, want <transport>/%s", rec.Source, dl.Queue)
	}
	if rec.Consumer != "transporttest" || rec.ConsumerVersion != "v-test" || rec.Host == "" {
		t.Errorf("consumer identity %q %q host %q, want transporttest v-test <host>", rec.Consumer, rec.ConsumerVersion, rec.Host)
	}
	if rec.DeliveryCount < 1 {
		t.Errorf("delivery count %d in the evidence, want >= 1", rec.DeliveryCount)
	}
	if rec.RetryCount != retries {
		t.Errorf("retry count %d in the evidence, want %d", rec.RetryCount, retries)
	}
	if rec.FirstFailureAt.IsZero() || rec.LastFailureAt.IsZero() || rec.DeadLetteredAt.IsZero() {
		t.Errorf("failure times missing: first %v last %v dead-lettered %v", rec.FirstFailureAt, rec.LastFailureAt, rec.DeadLetteredAt)
	}
	if dl.Headers[evidence.HeaderEventID] != nil && dl.Headers[evidence.HeaderEventID] != dl.EventID {
		t.Errorf("x-lily-event-id %v, want %s", dl.Headers[evidence.HeaderEventID], dl.EventID)
	}
}

func testPermanent(t *testing.T, h Harness) {
	e := newEnv(t, h, lily.QueueConfig{RetryAttempts: 3, RetryBackoffMillis: new(int64(20))})
	id := e.publish(transport.Message{Body: []byte("not json")})[0]
	e.consume(lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		e.called(d)
		var v map[string]any
		if err := json.Unmarshal(d.Body, &v); err != nil {
			return lily.Permanent(fmt.Errorf("decode order: %w", err))
		}
		return nil
	}), e.allTerminal)
	if got := e.callsOf(id); got != 1 {
		t.Errorf("handler called %d times, want 1 (no retry of a permanent failure)", got)
	}
	dl := e.deadLetter(id)
	checkEvidence(t, dl, evidence.ReasonPermanent, "*json.SyntaxError", 0)
	e.conserve(0)
}

func testPermanentAllowList(t *testing.T, h Harness) {
	e := newEnv(t, h, lily.QueueConfig{RetryAttempts: 3, RetryBackoffMillis: new(int64(20)), PermanentErrors: []string{"*json.SyntaxError"}})
	id := e.publish(transport.Message{Body: []byte("{broken")})[0]
	e.consume(lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		e.called(d)
		var v map[string]any
		return json.Unmarshal(d.Body, &v)
	}), e.allTerminal)
	if got := e.callsOf(id); got != 1 {
		t.Errorf("handler called %d times, want 1 (allow-listed permanent type)", got)
	}
	dl := e.deadLetter(id)
	checkEvidence(t, dl, evidence.ReasonPermanent, "*json.SyntaxError", 0)
	e.conserve(0)
}

func testImmediateRetries(t *testing.T, h Harness) {
	e := newEnv(t, h, lily.QueueConfig{ImmediateRetries: 2, ImmediateRetryMillis: new(int64(5))})
	id := e.publish(transport.Message{Body: []byte("blip")})[0]
	e.consume(lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		if d.RetryCount != 0 || d.DeliveryCount != 1 {
			t.Errorf("immediate retry went through the broker: retry=%d delivery=%d", d.RetryCount, d.DeliveryCount)
		}
		if e.called(d) < 3 {
			return errors.New("blip")
		}
		return nil
	}), e.allTerminal)
	if got := e.callsOf(id); got != 3 {
		t.Errorf("handler called %d times, want 3", got)
	}
	if e.count(lily.EventAcked) != 1 || e.count(lily.EventRetried) != 0 {
		t.Errorf("acked %d retried %d, want 1 and 0", e.count(lily.EventAcked), e.count(lily.EventRetried))
	}
	e.conserve(0)
}
