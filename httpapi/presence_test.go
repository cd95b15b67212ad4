package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
)

// TestConsumersAndPause: GET /api/consumers lists a live and a stale
// instance (stale marked, not hidden) and the pausable queues; pausing and
// resuming need the operator role (a viewer is refused 403 and audited),
// refuse an unknown queue naming the known ones, are audited under the
// token's name, and /healthz reports a paused queue without degrading.
func TestConsumersAndPause(t *testing.T) {
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		f := mk(t, allTokens)
		ctx := context.Background()
		now := time.Now()
		for _, c := range []*catalog.Consumer{
			{Instance: "live-1", Queue: "orders.created", Name: "orders-svc", Version: "v2", Host: "h1", PID: 11, Breaker: "closed",
				HeartbeatMillis: 5000, StartedAt: now.Add(-time.Hour), LastSeen: now},
			{Instance: "dead-2", Queue: "orders.created", Name: "orders-svc", Version: "v1", Host: "h2", PID: 22, Breaker: "open",
				HeartbeatMillis: 5000, StartedAt: now.Add(-2 * time.Hour), LastSeen: now.Add(-time.Minute)},
		} {
			if err := f.Catalog.Heartbeat(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		var view consumersJSON
		if code := f.call("GET", "/api/consumers", &viewerToken, nil, &view); code != http.StatusOK {
			t.Fatalf("GET /api/consumers: %d", code)
		}
		if len(view.Consumers) != 2 || view.Consumers[0].Instance != "dead-2" || !view.Consumers[0].Stale || view.Consumers[1].Stale {
			t.Fatalf("consumers = %+v, want dead-2 stale and live-1 live", view.Consumers)
		}
		var qs []string
		for _, q := range view.Queues {
			qs = append(qs, q.Queue)
		}
		if strings.Join(qs, ",") != "orders.created,payments.captured" {
			t.Errorf("pausable queues = %v", qs)
		}

		var e apiError
		if code := f.call("POST", "/api/queues/orders.created/pause", &viewerToken, pauseRequest{Reason: "x"}, &e); code != http.StatusForbidden {
			t.Errorf("a viewer's pause: %d %+v, want 403", code, e)
		}
		if code := f.call("POST", "/api/queues/orders.craeted/pause", &operatorToken, nil, &e); code != http.StatusBadRequest ||
			e.Field != "queue" || !strings.Contains(e.Error, "did you mean orders.created?") || !strings.Contains(e.Error, "known: orders.created, payments.captured") {
			t.Errorf("pause of an unknown queue: %d %+v", code, e)
		}
		var got queuePauseJSON
		if code := f.call("POST", "/api/queues/orders.created/pause", &operatorToken, pauseRequest{Reason: "payments API maintenance"}, &got); code != http.StatusOK ||
			!got.Paused || got.Changed == nil || !*got.Changed || got.Actor != "otto" || got.Reason != "payments API maintenance" {
			t.Fatalf("operator's pause: %d %+v", code, got)
		}
		var h healthJSON
		if code := f.call("GET", "/healthz", nil, nil, &h); code != http.StatusOK || len(h.Paused) != 1 ||
			!strings.Contains(h.Paused[0], "queue orders.created: paused by otto") || !strings.Contains(h.Paused[0], "payments API maintenance") {
			t.Errorf("healthz while paused: %d %+v", code, h)
		}
		for _, r := range h.Reasons {
			if strings.Contains(r, "paused") {
				t.Errorf("healthz counts the pause as a problem: %q", r)
			}
		}
		if code := f.call("POST", "/api/queues/orders.created/resume", &operatorToken, nil, &got); code != http.StatusOK || got.Paused || !*got.Changed {
			t.Fatalf("operator's resume: %d %+v", code, got)
		}
		var after healthJSON
		if code := f.call("GET", "/healthz", nil, nil, &after); code != http.StatusOK || len(after.Paused) != 0 {
			t.Errorf("healthz after resume: %+v", after)
		}
		var audit []string
		err := f.Catalog.EachAudit(ctx, catalog.AuditFilter{}, func(r *catalog.AuditRecord) error {
			if r.Action == catalog.ActionPause || r.Action == catalog.ActionResume || (r.Action == catalog.ActionRefused && strings.Contains(r.Selector, "pause")) {
				audit = append(audit, r.Actor+" "+r.Action+" "+r.Outcome)
			}
			return nil
		})
		if want := "vera refused forbidden|otto pause paused|otto resume resumed"; err != nil || strings.Join(audit, "|") != want {
			t.Errorf("audit = %q, %v; want %s", audit, err, want)
		}
	})
}
