package lily_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// wantAttempt is one attempt a test expects in the dead letter's history.
type wantAttempt struct {
	retry   int
	typ     string
	msg     string
	outcome evidence.Outcome
}

// A handler that fails differently on each of its three attempts (two
// broker-delayed retries, then retries_exhausted): the dead-letter entry
// carries all three errors in order, each with the retry count of the
// delivery that failed and what became of it, the secret in one of them
// redacted. The message is dead-lettered exactly once and the ledger
// balances.
func TestAttemptHistoryReachesTheDeadLetter(t *testing.T) {
	t.Parallel()
	q := lily.QueueConfig{Name: "attempts.q", RetryAttempts: 2, RetryBackoffMillis: new(int64(10))}.WithDefaults()
	errs := []error{
		errors.New("dial tcp 10.0.0.7:5432: connection refused"),
		fmt.Errorf("login: %w", errors.New("password=hunter2 rejected")),
		&lily.TimeoutError{Timeout: time.Second, Err: context.DeadlineExceeded},
	}
	checkAttempts(t, q, errs, []wantAttempt{
		{0, "*errors.errorString", "dial tcp 10.0.0.7:5432: connection refused", evidence.OutcomeRetry},
		{1, "*errors.errorString", "login: password=*** rejected", evidence.OutcomeRetry},
		{2, "*lily.TimeoutError", "handler timed out after 1s: context deadline exceeded", evidence.OutcomeDeadLetter},
	})
}

// Immediate retries are attempts too: each failed in-process call is in
// the history, with the retry count of its delivery.
func TestAttemptHistoryKeepsImmediateRetries(t *testing.T) {
	t.Parallel()
	q := lily.QueueConfig{Name: "attempts.immediate.q", RetryAttempts: 1, RetryBackoffMillis: new(int64(10)),
		ImmediateRetries: 1, ImmediateRetryMillis: new(int64(1))}.WithDefaults()
	errs := make([]error, 4)
	want := make([]wantAttempt, 4)
	for i := range errs {
		errs[i] = fmt.Errorf("call %d failed", i+1)
		want[i] = wantAttempt{i / 2, "*errors.errorString", fmt.Sprintf("call %d failed", i+1), evidence.OutcomeImmediateRetry}
	}
	want[1].outcome, want[3].outcome = evidence.OutcomeRetry, evidence.OutcomeDeadLetter
	checkAttempts(t, q, errs, want)
}

// checkAttempts publishes one message to q on an embedded SQLite store and
// runs a consumer whose handler returns errs in turn until it is
// dead-lettered; the entry's attempt history must be want, the message
// dead-lettered once and the ledger balanced.
func checkAttempts(t *testing.T, q lily.QueueConfig, errs []error, want []wantAttempt) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lily.db"), sqlite.Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
		t.Fatal(err)
	}
	if err := lily.Publish(ctx, tr, q.Name, []lily.Message{{EventID: "e1", Body: []byte(`{"order":1}`)}}); err != nil {
		t.Fatal(err)
	}
	var calls, deadLettered atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		if e.Kind == lily.EventDeadLettered && deadLettered.Add(1) == 1 {
			stop()
		}
	})
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		n := calls.Add(1)
		if int(n) > len(errs) {
			return nil
		}
		return errs[n-1]
	}), lily.ConsumerOptions{Queue: q, ReceiveWait: 20 * time.Millisecond, Hooks: []lily.Hook{hook}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(runCtx); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != int64(len(errs)) || deadLettered.Load() != 1 {
		t.Fatalf("handler calls = %d, dead-letterings = %d; want %d and 1", calls.Load(), deadLettered.Load(), len(errs))
	}
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	entries, err := cat.List(ctx, catalog.Filter{Queue: q.Name}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("%d catalog entries, want the one dead letter", len(entries))
	}
	hist, err := evidence.DecodeAttempts(entries[0].Headers)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist.Attempts) != len(want) || hist.Dropped != 0 {
		t.Fatalf("attempt history %+v; want %d attempts", hist, len(want))
	}
	for i, w := range want {
		a := hist.Attempts[i]
		if a.RetryCount != w.retry || a.ErrorType != w.typ || a.ErrorMessage != w.msg || a.Outcome != w.outcome || a.DeliveryCount != 1 {
			t.Errorf("attempt %d = %+v; want retry %d, %s: %q, %s", i, a, w.retry, w.typ, w.msg, w.outcome)
		}
		if i > 0 && a.At.Before(hist.Attempts[i-1].At) {
			t.Errorf("attempt %d at %v, before attempt %d", i, a.At, i-1)
		}
	}
	if strings.Contains(fmt.Sprint(entries[0].Headers), "hunter2") {
		t.Error("a secret reached the dead letter's headers")
	}
	rec, err := evidence.Decode(entries[0].Headers)
	if err != nil || !rec.FirstFailureAt.Equal(hist.Attempts[0].At) || !rec.LastFailureAt.Equal(hist.Attempts[len(want)-1].At) {
		t.Errorf("record %+v, %v: want the history's first and last failure", rec, err)
	}
	rows, err := ledger.New(cat).Rows(ctx, tr)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Accepted != 1 || rows[0].DeadLettered != 1 || rows[0].Acked != 0 || rows[0].Lost != 0 || rows[0].InFlight != 0 {
		t.Fatalf("ledger = %+v, want 1 accepted = 1 dead-lettered", rows)
	}
}
