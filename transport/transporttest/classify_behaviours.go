package transporttest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// testDecodeErrorPermanentByDefault: with no permanent_errors, a decode
// error (here *json.SyntaxError, returned bare) dead-letters on its first
// failure with reason permanent (000_*, 002_*); a queue that lists it in
// retry_errors retries it through its buckets instead.
func testDecodeErrorPermanentByDefault(t *testing.T, h Harness) {
	decode := func(e *env) lily.Handler {
		return lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
			e.called(d)
			var v map[string]any
			return json.Unmarshal(d.Body, &v)
		})
	}
	t.Run("default", func(t *testing.T) {
		e := newEnv(t, h, lily.QueueConfig{RetryAttempts: 3, RetryBackoffMillis: new(int64(20))})
		id := e.publish(transport.Message{Body: []byte("{broken")})[0]
		e.consume(decode(e), e.allTerminal)
		if got := e.callsOf(id); got != 1 {
			t.Errorf("handler called %d times, want 1: a decode error is permanent by default", got)
		}
		dl, ok := e.deadLetters()[id]
		if !ok {
			t.Fatalf("message %s not dead-lettered", id)
		}
		checkEvidence(t, dl, evidence.ReasonPermanent, "*json.SyntaxError", 0)
		e.conserve(0)
	})
	t.Run("retry_errors", func(t *testing.T) {
		e := newEnv(t, h, lily.QueueConfig{RetryAttempts: 2, RetryBackoffMillis: new(int64(20)), RetryErrors: []string{"*json.SyntaxError"}})
		id := e.publish(transport.Message{Body: []byte("{broken")})[0]
		e.consume(decode(e), e.allTerminal)
		if got := e.callsOf(id); got != 3 {
			t.Errorf("handler called %d times, want 3 (retry_errors: retried twice)", got)
		}
		dl, ok := e.deadLetters()[id]
		if !ok {
			t.Fatalf("message %s not dead-lettered", id)
		}
		checkEvidence(t, dl, evidence.ReasonRetriesExhausted, "*json.SyntaxError", 2)
		e.conserve(0)
	})
}
