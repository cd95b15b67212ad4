package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/redrive"
)

// A job holds its queue: a second redrive of the queue is refused naming
// it, until it is cancelled.
func TestRedriveJobConflictAndCancel(t *testing.T) {
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		f := mk(t, allTokens)
		sel := map[string]any{"queue": "orders.created", "reason": "permanent"}
		// No consumer and an hour to ack the sample: the job waits.
		var j jobJSON
		if code := f.call("POST", "/api/redrives", &operatorToken, map[string]any{"filter": sel, "sample": 1, "observe": "1h"}, &j); code != http.StatusAccepted {
			t.Fatalf("start: %d %+v", code, j)
		}
		waitStage(t, f, j.ID, redrive.StageObserve) // the sample went out
		var e apiError
		if code := f.call("POST", "/api/redrives", &operatorToken, map[string]any{"filter": map[string]any{"queue": "orders.created"}}, &e); code != http.StatusConflict ||
			!strings.Contains(e.Error, "redrive job "+itoa(j.ID)) || !strings.Contains(e.Error, "lily dlq cancel "+itoa(j.ID)) {
			t.Errorf("second job: %d %+v", code, e)
		}
		var c jobJSON
		if code := f.call("POST", "/api/redrives/"+itoa(j.ID)+"/cancel", &operatorToken, nil, &c); code != http.StatusAccepted || c.State != redrive.JobCancelled {
			t.Fatalf("cancel: %d %+v", code, c)
		}
		j = f.waitJob(j.ID, &viewerToken)
		if j.State != redrive.JobCancelled || j.Error != "cancelled by otto" || j.Redriven != 1 {
			t.Errorf("job after cancel = %+v", j)
		}
		if code := f.call("POST", "/api/redrives/"+itoa(j.ID)+"/cancel", &operatorToken, nil, &e); code != http.StatusConflict {
			t.Errorf("cancelling again: %d %+v", code, e)
		}
		if st := f.States(); st["redriven"] != 1 || st["pending"] != 12 {
			t.Errorf("states %v: want the sample redriven, the rest pending", st)
		}
		if code := f.call("POST", "/api/redrives", &operatorToken, map[string]any{"filter": sel, "dry_run": true}, &e); code != http.StatusOK {
			t.Errorf("dry run after the cancel: %d", code)
		}
	})
}

// delivery_limit entries are held back unless the request lets them in.
func TestRedriveHoldsBackCrashers(t *testing.T) {
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		f := mk(t, nil)
		sel := map[string]any{"queue": "payments.captured"}
		var plan dryRunAnswer
		if code := f.call("POST", "/api/redrives", nil, map[string]any{"filter": sel, "dry_run": true}, &plan); code != http.StatusOK ||
			plan.HeldBack != 3 || plan.Selected != 0 {
			t.Errorf("bulk plan: %d %+v", code, plan)
		}
		if code := f.call("POST", "/api/redrives", nil, map[string]any{"filter": sel, "dry_run": true, "include_crashers": true}, &plan); code != http.StatusOK ||
			plan.HeldBack != 0 || plan.Selected != 3 {
			t.Errorf("plan with include_crashers: %d %+v", code, plan)
		}
		var e apiError
		if code := f.call("POST", "/api/redrives", nil, map[string]any{"filter": sel, "include_crashers": true, "new_consumer_version": "v2"}, &e); code != http.StatusBadRequest ||
			e.Field != "new_consumer_version" {
			t.Errorf("both: %d %+v", code, e)
		}
	})
}

// A server that closes mid-job releases the job (it is not cancelled): the
// next runner takes it over at once and finishes it (the sample sent or
// not yet: the server may close before or after it went out).
func TestRedriveJobOutlivesTheServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	var j jobJSON
	f.call("POST", "/api/redrives", nil, map[string]any{"filter": map[string]any{"queue": "orders.created", "reason": "permanent"}, "sample": 1, "observe": "1h"}, &j)
	f.srv.Close()
	ctx := context.Background()
	left, err := redrive.New(f.Catalog).Job(ctx, j.ID)
	if err != nil || left.State != redrive.JobSampling || left.Holder != "" || left.Sent > 1 {
		t.Fatalf("job after the server closed = %+v, %v", left, err)
	}
	f.Consume("orders.created")
	c, err := redrive.New(f.Catalog).ClaimJob(ctx, "next-runner", time.Minute, time.Now())
	if err != nil || c == nil || c.ID != j.ID {
		t.Fatalf("ClaimJob = %+v, %v", c, err)
	}
	out, err := redrive.New(f.Catalog).RunJob(ctx, c, redrive.JobRunParams{Holder: "next-runner", Poll: 5 * time.Millisecond,
		Target: func(context.Context, string) (redrive.Publisher, error) { return f.Transport, nil }})
	if err != nil || out.State != redrive.JobDone || out.Sent != 6 || !out.SampleClean {
		t.Errorf("resumed job = %+v, %v", out, err)
	}
	f.Conserved()
}

// waitStage polls a job until it reaches stage.
func waitStage(t *testing.T, f *fixture, id int64, stage string) {
	t.Helper()
	waittest.Poller{Limit: time.Minute}.For(t, fmt.Sprintf("job %d to reach stage %s", id, stage), func() (bool, string) {
		var j jobJSON
		if f.call("GET", "/api/redrives/"+itoa(id), &viewerToken, nil, &j); j.Stage == stage {
			return true, ""
		}
		if !j.State.Active() {
			t.Fatalf("job %d ended before stage %s: %+v", id, stage, j)
		}
		return false, fmt.Sprintf("%+v", j)
	})
}
