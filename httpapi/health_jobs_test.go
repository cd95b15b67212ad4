package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// TestHealthSaysJobOrphaned (issue 32 item 3): a redrive job whose runner
// died holds its queue until someone resumes or cancels it; /healthz says
// so, with the commands, once the runner's lease ran out, and stops
// saying it when a runner holds the job again.
func TestHealthSaysJobOrphaned(t *testing.T) {
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		f := mk(t, nil)
		ctx := context.Background()
		orphaned := func() (bool, string) {
			var h healthJSON
			if code := f.call("GET", "/healthz", nil, nil, &h); code != http.StatusOK {
				t.Fatalf("healthz: %d %+v", code, h)
			}
			for _, r := range h.Reasons {
				if strings.Contains(r, "is orphaned") {
					return true, r
				}
			}
			return false, strings.Join(h.Reasons, "; ")
		}
		e := catalog.NewEntry("orders.created", transport.Message{EventID: "o-1", Body: []byte(`{"id":1}`)}, transport.Headers{}, "permanent", time.Now())
		if err := f.Catalog.Insert(ctx, e); err != nil {
			t.Fatal(err)
		}
		rd := redrive.New(f.Catalog)
		// A runner that takes the job with a lease of 1 ms and is never
		// heard of again: a process killed right after it started.
		j, err := rd.CreateJob(ctx, redrive.JobSpec{Filter: catalog.Filter{Queue: "orders.created"}, Actor: "alice", Holder: "dead-runner", Lease: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var reason string
		waittest.Poller{Limit: 30 * time.Second, Every: 10 * time.Millisecond}.For(t, "/healthz to call the job orphaned", func() (bool, string) {
			ok, r := orphaned()
			reason = r
			return ok, r
		})
		want := fmt.Sprintf("queue orders.created: redrive job %d is orphaned: no runner holds it (0 of %d handled", j.ID, j.Total)
		if !strings.Contains(reason, want) || !strings.Contains(reason, fmt.Sprintf("'lily dlq resume %d'", j.ID)) {
			t.Errorf("orphaned reason %q, want %q and the resume command", reason, want)
		}
		if _, err := rd.ClaimJobID(ctx, j.ID, "live-runner", time.Hour, time.Now()); err != nil {
			t.Fatal(err)
		}
		if ok, r := orphaned(); ok {
			t.Errorf("healthz with a live runner holding the job: %q", r)
		}
	})
}
