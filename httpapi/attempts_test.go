package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// The entry route decodes the attempt history (x-lily-attempts) into
// evidence.attempts, oldest first, with evidence.attempts_dropped — the
// wire names the console and openapi.json use.
func TestEntryAttempts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	h := transport.Headers{}
	evidence.Record{Reason: evidence.ReasonRetriesExhausted, ErrorMessage: "timeout", DeadLetteredAt: t0.Add(time.Hour)}.Apply(h)
	evidence.AddAttempt(h, evidence.Attempt{At: t0, RetryCount: 0, DeliveryCount: 1, ErrorType: "*net.OpError", ErrorMessage: "refused", Outcome: evidence.OutcomeRetry})
	evidence.AddAttempt(h, evidence.Attempt{At: t0.Add(time.Minute), RetryCount: 1, DeliveryCount: 2, ErrorType: "*lily.TimeoutError", ErrorMessage: "timeout", Outcome: evidence.OutcomeDeadLetter})
	e := catalog.NewEntry("orders.created", transport.Message{EventID: "tries-1", Body: []byte(`{}`)}, h, "retries_exhausted", time.Now())
	if err := f.Catalog.Insert(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Evidence struct {
			Attempts        []map[string]any `json:"attempts"`
			AttemptsDropped *int             `json:"attempts_dropped"`
		} `json:"evidence"`
	}
	if code := f.call("GET", "/api/entries/"+itoa(e.ID), nil, nil, &got); code != http.StatusOK {
		t.Fatalf("entry: %d", code)
	}
	a := got.Evidence.Attempts
	if len(a) != 2 || got.Evidence.AttemptsDropped == nil || *got.Evidence.AttemptsDropped != 0 {
		t.Fatalf("attempts %+v, dropped %v", a, got.Evidence.AttemptsDropped)
	}
	want := []map[string]any{
		{"at": "2026-11-29T12:00:00Z", "retry_count": 0.0, "delivery_count": 1.0, "error_type": "*net.OpError", "error_message": "refused", "outcome": "retry"},
		{"at": "2026-11-29T12:01:00Z", "retry_count": 1.0, "delivery_count": 2.0, "error_type": "*lily.TimeoutError", "error_message": "timeout", "outcome": "dead_letter"},
	}
	for i := range want {
		for k, v := range want[i] {
			if a[i][k] != v {
				t.Errorf("attempt %d: %s = %#v, want %#v", i, k, a[i][k], v)
			}
		}
	}
}
