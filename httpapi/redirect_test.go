package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// POST /api/redrives with "to": a queue that is not configured, or is
// configured but does not exist, is refused with 400 naming the field,
// nothing changed, the refusal audited; a dry run names the target; a job
// sends to the target queue, whose consumer acks; the ledgers balance.
func TestRedriveRedirect(t *testing.T) {
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		var f *fixture
		f = mk(t, allTokens, func(o *Options) {
			o.Config.Queues = append(o.Config.Queues, lily.QueueConfig{Name: "orders.quarantine"}.WithDefaults())
			broker := o.Target
			o.Target = func(ctx context.Context, q string) (redrive.Publisher, error) {
				qs, err := f.Transport.Queues(ctx)
				if err != nil {
					return nil, err
				}
				if !slices.Contains(qs, q) {
					return nil, fmt.Errorf("queue %q no longer exists in the SQLite store: %w", q, transport.ErrUnknownQueue)
				}
				return broker(ctx, q)
			}
		})
		sel := map[string]any{"queue": "orders.created", "reason": "permanent"}
		for to, want := range map[string]string{
			"orders.nowhere":    `to "orders.nowhere": not a [[queue]] of the configuration`,
			"orders.quarantine": `to "orders.quarantine": queue "orders.quarantine" no longer exists`,
		} {
			for _, dry := range []bool{true, false} {
				var e apiError
				if code := f.call("POST", "/api/redrives", &operatorToken, map[string]any{"filter": sel, "to": to, "dry_run": dry}, &e); code != http.StatusBadRequest ||
					e.Field != "to" || !strings.Contains(e.Error, want) || !strings.Contains(e.Error, "nothing was sent or changed") {
					t.Errorf("to %s (dry run %v): %d %+v", to, dry, code, e)
				}
			}
		}
		if st := f.States(); st["pending"] != 13 {
			t.Fatalf("states after the refusals: %v", st)
		}
		var failed int
		f.Catalog.EachAudit(context.Background(), catalog.AuditFilter{Action: catalog.ActionRedrive}, func(r *catalog.AuditRecord) error {
			if r.Outcome == catalog.OutcomeFailed && r.Actor == "otto" && strings.Contains(r.Selector, `"to":`) {
				failed++
			}
			return nil
		})
		if failed != 4 {
			t.Errorf("%d audited refusals, want 4", failed)
		}
		var plan dryRunAnswer
		if code := f.call("POST", "/api/redrives", &operatorToken, map[string]any{"filter": sel, "to": "payments.captured", "dry_run": true}, &plan); code != http.StatusOK ||
			plan.Selected != 6 || plan.Redriven != 6 {
			t.Errorf("dry run: %d %+v", code, plan)
		}
		// A viewer may not redrive, redirected or not.
		var e apiError
		if code := f.call("POST", "/api/redrives", &viewerToken, map[string]any{"filter": sel, "to": "payments.captured"}, &e); code != http.StatusForbidden {
			t.Errorf("viewer redirect: %d %+v", code, e)
		}
		f.Consume("payments.captured")
		var j jobJSON
		if code := f.call("POST", "/api/redrives", &operatorToken, map[string]any{"filter": sel, "to": "payments.captured", "sample": 1, "observe": "1m", "rate": 500}, &j); code != http.StatusAccepted || j.To != "payments.captured" {
			t.Fatalf("start: %d %+v", code, j)
		}
		j = f.waitJob(j.ID, &viewerToken)
		if j.State != redrive.JobDone || j.Redriven != 6 || !j.SampleClean || j.To != "payments.captured" {
			t.Fatalf("job = %+v", j)
		}
		if st := f.States(); st["redriven"] != 6 || st["pending"] != 7 {
			t.Errorf("states %v", st)
		}
		f.WaitAcked("payments.captured", 6) // the consumer settles on its own time
		rows, err := ledger.New(f.Catalog).Rows(context.Background(), f.Transport)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Queue == "orders.created" && r.Redirected != 6 {
				t.Errorf("source ledger %+v", r)
			}
			if r.Queue == "payments.captured" && (r.Accepted != 9 || r.Acked != 6) {
				t.Errorf("target ledger %+v", r)
			}
		}
		f.Conserved()
	})
}
