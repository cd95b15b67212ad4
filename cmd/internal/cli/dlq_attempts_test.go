package cli

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// 'lily dlq show' lists the attempts a dead letter carried: a table row
// per kept attempt in order (time with its zone, retry, delivery, outcome,
// error on one line), the dropped ones counted after the first; --json
// has them under evidence.attempts. A malformed history is a problem beside
// intact evidence.
func TestDLQShowAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tr := newSeedStore(t)
	msgs := []transport.Message{{EventID: "evt-1", Body: []byte(`{"order":1}`)}, {EventID: "evt-2", Body: []byte(`{"order":2}`)}}
	if err := tr.Publish(ctx, &transport.PublishParams{Queue: dlqQueue, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	const total = 12 // one more than the header keeps
	deadLetterAll(t, tr, len(msgs), func(i int, h transport.Headers) evidence.Reason {
		evidence.Record{Reason: evidence.ReasonRetriesExhausted, ErrorType: "*net.OpError", ErrorMessage: "last",
			Source: "sqlite/" + dlqQueue, DeliveryCount: 1, DeadLetteredAt: t0.Add(time.Hour)}.Apply(h)
		if i == 1 {
			h[evidence.HeaderAttempts] = `{"v":9}`
			return evidence.ReasonRetriesExhausted
		}
		for n := range total {
			outcome := evidence.OutcomeRetry
			if n == total-1 {
				outcome = evidence.OutcomeDeadLetter
			}
			evidence.AddAttempt(h, evidence.Attempt{At: t0.Add(time.Duration(n) * time.Minute), RetryCount: n, DeliveryCount: 1,
				ErrorType: "*net.OpError", ErrorMessage: fmt.Sprintf("try %d:\nconnection refused", n), Outcome: outcome})
		}
		return evidence.ReasonRetriesExhausted
	})
	tr.Close()

	code, out, errOut := run(t, "dlq", "show", "1", "--db", db)
	if code != 0 {
		t.Fatalf("show: %d %s", code, errOut)
	}
	rows := regexp.MustCompile(`(?m)^\s+(2026-11-29T\S+Z)\s+(\d+)\s+1\s+(\S+)\s+\*net\.OpError: try (\d+): connection refused$`).FindAllStringSubmatch(out, -1)
	if len(rows) != 1+evidence.MaxRecentAttempts || !strings.Contains(out, fmt.Sprintf("attempts (%d):", total)) ||
		!strings.Contains(out, "… 1 more not kept") || !regexp.MustCompile(`(?m)^\s+time\s+retry\s+delivery\s+outcome\s+error$`).MatchString(out) {
		t.Fatalf("attempt table: %d rows\n%s", len(rows), out)
	}
	for i, r := range rows {
		n := i
		if i > 0 {
			n = i + 1 // attempt 1 was dropped
		}
		want := []string{t0.Add(time.Duration(n) * time.Minute).Format(evidence.TimeLayout), fmt.Sprint(n), "retry", fmt.Sprint(n)}
		if n == total-1 {
			want[2] = "dead_letter"
		}
		if r[1] != want[0] || r[2] != want[1] || r[3] != want[2] || r[4] != want[3] {
			t.Errorf("row %d = %q, want %q", i, r[1:], want)
		}
	}
	if strings.Index(out, "try 0:") > strings.Index(out, "1 more not kept") || strings.Index(out, "1 more not kept") > strings.Index(out, "try 2:") {
		t.Errorf("the dropped count is not between the first and the kept recent attempts:\n%s", out)
	}

	code, out, _ = run(t, "dlq", "show", "1", "--db", db, "--json")
	var e entryJSON
	mustJSON(t, out, &e)
	if code != 0 || len(e.Evidence.Attempts) != 1+evidence.MaxRecentAttempts || e.Evidence.AttemptsDropped != 1 ||
		e.Evidence.Attempts[0].ErrorMessage != "try 0:\nconnection refused" || e.Evidence.Attempts[10].Outcome != "dead_letter" ||
		e.Evidence.Attempts[10].RetryCount != 11 || !e.Evidence.Attempts[10].At.Equal(t0.Add(11*time.Minute)) {
		t.Errorf("show --json attempts: %d %+v dropped %d", code, e.Evidence.Attempts, e.Evidence.AttemptsDropped)
	}

	code, out, _ = run(t, "dlq", "show", "2", "--db", db, "--json")
	e = entryJSON{}
	mustJSON(t, out, &e)
	if code != 0 || len(e.Evidence.Attempts) != 0 || len(e.Evidence.Problems) != 1 || !strings.Contains(e.Evidence.Problems[0], evidence.HeaderAttempts) ||
		e.Evidence.Lily.Reason != "retries_exhausted" || e.Evidence.Lily.ErrorMessage != "last" {
		t.Errorf("malformed history: %d %+v", code, e.Evidence)
	}
}
