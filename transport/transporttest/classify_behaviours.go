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
	for _, c := range []struct {
		name    string
		qc      lily.QueueConfig
		calls   int // handler calls
		why     string
		reason  evidence.Reason
		retries int
	}{
		{"default", lily.QueueConfig{RetryAttempts: 3, RetryBackoffMillis: new(int64(20))},
			1, "a decode error is permanent by default", evidence.ReasonPermanent, 0},
		{"retry_errors", lily.QueueConfig{RetryAttempts: 2, RetryBackoffMillis: new(int64(20)), RetryErrors: []string{"*json.SyntaxError"}},
			3, "retry_errors: retried twice", evidence.ReasonRetriesExhausted, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, h, c.qc)
			id := e.publish(transport.Message{Body: []byte("{broken")})[0]
			e.consume(decode(e), e.allTerminal)
			if got := e.callsOf(id); got != c.calls {
				t.Errorf("handler called %d times, want %d (%s)", got, c.calls, c.why)
			}
			checkEvidence(t, e.deadLetter(id), c.reason, "*json.SyntaxError", c.retries)
			e.conserve(0)
		})
	}
}
