package rules

import (
	"context"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/redrive"
)

func TestCompareVersions(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"1.10.0", "1.9.3", 1}, {"v1.4.0", "1.4", 0}, {"1.4.0-rc1", "1.4.0", -1}, {"1.4.1", "1.4.0-rc1", 1},
		{"2", "10", -1}, {"1.4.0+build7", "1.4.0", 0}, {"main", "1.0", 1},
	} {
		if got := CompareVersions(tt.a, tt.b); got != tt.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestBreakerRuleFiresOnce: a breaker that closes after an outage fires
// the rule once (however often it is asked, by any number of callers); the
// job it makes selects exactly the retries_exhausted entries of the
// outage's window, never the permanent or delivery_limit ones, nor those
// of other queues or outside the window; a dry run is audited first.
func TestBreakerRuleFiresOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		ctx := context.Background()
		opened, closed := testNow.Add(-30*time.Minute), testNow.Add(-10*time.Minute)
		at := func(e *catalog.Entry, d time.Time) *catalog.Entry { e.DeadLetteredAt = d; return e }
		in := []*catalog.Entry{
			at(entry("orders", "in-1", evidence.ReasonRetriesExhausted, catalog.StatePending, "dial tcp: refused"), opened.Add(time.Minute)),
			at(entry("orders", "in-2", evidence.ReasonRetriesExhausted, catalog.StatePending, "dial tcp: refused"), closed.Add(-time.Minute)),
			at(entry("orders", "lookback", evidence.ReasonRetriesExhausted, catalog.StatePending, "dial tcp: refused"), opened.Add(-time.Minute)),
		}
		out := []*catalog.Entry{
			at(entry("orders", "perm", evidence.ReasonPermanent, catalog.StatePending, "bad json"), opened.Add(time.Minute)),
			at(entry("orders", "crash", evidence.ReasonDeliveryLimit, catalog.StatePending, "killed"), opened.Add(time.Minute)),
			at(entry("orders", "before", evidence.ReasonRetriesExhausted, catalog.StatePending, "dial tcp: refused"), opened.Add(-time.Hour)),
			at(entry("orders", "after", evidence.ReasonRetriesExhausted, catalog.StatePending, "dial tcp: refused"), closed.Add(time.Minute)),
			at(entry("payments", "other", evidence.ReasonRetriesExhausted, catalog.StatePending, "dial tcp: refused"), opened.Add(time.Minute)),
		}
		if err := s.Insert(ctx, append(append([]*catalog.Entry{}, in...), out...)...); err != nil {
			t.Fatal(err)
		}
		rule := Rule{Name: "after-outage", Queue: "orders", When: TriggerBreakerClosed, Reason: "retries_exhausted",
			Lookback: 5 * time.Minute, MaxAge: 24 * time.Hour, Rate: 50}
		now := func() time.Time { return testNow }
		// No outage yet: nothing fires.
		if fired, err := New(s).Fire(ctx, FireParams{Rules: []Rule{rule}, Now: now}); err != nil || len(fired) != 0 {
			t.Fatalf("before any outage: fired %v, %v", fired, err)
		}
		rec := NewRuntimeRecorder(s, RecorderParams{Consumer: "w1", Now: func() time.Time { return opened }})
		rec.Observe(ctx, lily.Event{Kind: lily.EventBreaker, Queue: "orders", Breaker: lily.BreakerOpen})
		rec.p.Now = func() time.Time { return opened.Add(5 * time.Minute) }
		rec.Observe(ctx, lily.Event{Kind: lily.EventBreaker, Queue: "orders", Breaker: lily.BreakerHalfOpen})
		rec.Observe(ctx, lily.Event{Kind: lily.EventBreaker, Queue: "orders", Breaker: lily.BreakerOpen})
		rec.p.Now = func() time.Time { return closed }
		rec.Observe(ctx, lily.Event{Kind: lily.EventBreaker, Queue: "orders", Breaker: lily.BreakerHalfOpen})
		rec.Observe(ctx, lily.Event{Kind: lily.EventBreaker, Queue: "orders", Breaker: lily.BreakerClosed})

		plans, err := New(s).Plan(ctx, []Rule{rule}, testNow)
		if err != nil || len(plans) != 1 || plans[0].Fired || plans[0].Selected != len(in) {
			t.Fatalf("plan = %+v, %v", plans, err)
		}
		// A replica that claimed the firing and died: its claim is stale
		// and taken over.
		if ok, err := New(s).ClaimFiring(ctx, Firing{Rule: rule.Name, Occurrence: plans[0].Occurrence, Queue: "orders",
			FiredAt: testNow.Add(-10 * time.Minute), Op: "dead"}); err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		var fired []Plan
		for range 3 { // asked again and again: fires once
			f, err := New(s).Fire(ctx, FireParams{Rules: []Rule{rule}, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			fired = append(fired, f...)
		}
		if len(fired) != 1 || fired[0].JobID == 0 {
			t.Fatalf("fired = %+v", fired)
		}
		if fs, _ := New(s).Firings(ctx, ""); len(fs) != 1 || fs[0].State != "fired" || fs[0].Op == "dead" || fs[0].JobID != fired[0].JobID {
			t.Fatalf("firings = %+v", fs)
		}
		j, err := redrive.New(s).Job(ctx, fired[0].JobID)
		if err != nil {
			t.Fatal(err)
		}
		if j.Total != len(in) || j.Actor != "rule:after-outage" || j.Rate != 50 || j.State != redrive.JobQueued {
			t.Fatalf("job = %+v", j)
		}
		// The dry run was recorded under the job's operation, before it.
		var dry []string
		if err := s.EachAudit(ctx, catalog.AuditFilter{Op: j.Op}, func(r *catalog.AuditRecord) error {
			if r.DryRun {
				dry = append(dry, r.EventIDs...)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(dry) != len(in) {
			t.Fatalf("dry run audited %v", dry)
		}
		pub := &capture{}
		if j, err = redrive.New(s).ClaimJob(ctx, "test", 0, time.Now()); err != nil || j == nil {
			t.Fatalf("claim: %v %v", j, err)
		}
		if _, err := redrive.New(s).RunJob(ctx, j, redrive.JobRunParams{Holder: "test", Target: func(context.Context, string) (redrive.Publisher, error) { return pub, nil }}); err != nil {
			t.Fatal(err)
		}
		sent := map[string]bool{}
		for _, m := range pub.msgs {
			sent[m.EventID] = true
		}
		for _, e := range in {
			if !sent[e.EventID] {
				t.Errorf("%s was not redriven", e.EventID)
			}
		}
		for _, e := range out {
			if sent[e.EventID] {
				t.Errorf("%s was redriven", e.EventID)
			}
		}
		if len(pub.msgs) != len(in) {
			t.Errorf("sent %d messages, want %d", len(pub.msgs), len(in))
		}
		// Every entry is accounted: redriven or still pending.
		counts, err := s.CountBy(ctx, "state", catalog.Filter{})
		if err != nil || counts["redriven"] != int64(len(in)) || counts["pending"] != int64(len(out)) {
			t.Fatalf("states = %v, %v", counts, err)
		}
		plans, _ = New(s).Plan(ctx, []Rule{rule}, testNow)
		if len(plans) != 1 || !plans[0].Fired || plans[0].JobID != j.ID {
			t.Fatalf("after firing: %+v", plans)
		}
	})
}

// TestVersionRuleFiresWhenTheFixRuns: the rule for a fingerprint fires
// once a consumer of version >= min acked messages, and takes only the
// entries dead-lettered before that version ran.
func TestVersionRuleFiresWhenTheFixRuns(t *testing.T) {
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		ctx := context.Background()
		fixedAt := testNow.Add(-time.Hour)
		old := entry("orders", "old", evidence.ReasonPermanent, catalog.StatePending, "unknown field currency")
		old.DeadLetteredAt = fixedAt.Add(-time.Hour)
		newer := entry("orders", "newer", evidence.ReasonPermanent, catalog.StatePending, "unknown field currency")
		newer.DeadLetteredAt = fixedAt.Add(time.Minute)
		other := entry("orders", "other", evidence.ReasonPermanent, catalog.StatePending, "something else")
		other.DeadLetteredAt = fixedAt.Add(-time.Hour)
		if err := s.Insert(ctx, old, newer, other); err != nil {
			t.Fatal(err)
		}
		rule := Rule{Name: "currency-fix", Queue: "orders", When: TriggerConsumerVersion, Reason: "permanent",
			Fingerprint: old.Fingerprint, MinConsumerVersion: "1.10.0", MaxAge: 24 * time.Hour}
		now := func() time.Time { return testNow }
		rec := NewRuntimeRecorder(s, RecorderParams{Version: "1.9.9", Now: func() time.Time { return fixedAt.Add(-2 * time.Hour) }})
		rec.Observe(ctx, lily.Event{Kind: lily.EventAcked, Queue: "orders"})
		if fired, err := New(s).Fire(ctx, FireParams{Rules: []Rule{rule}, Now: now}); err != nil || len(fired) != 0 {
			t.Fatalf("older version: fired %v, %v", fired, err)
		}
		rec = NewRuntimeRecorder(s, RecorderParams{Version: "1.10.0", Now: func() time.Time { return fixedAt }})
		rec.Observe(ctx, lily.Event{Kind: lily.EventAcked, Queue: "orders"})
		rec.Observe(ctx, lily.Event{Kind: lily.EventAcked, Queue: "orders"}) // within Interval: no second write
		fired, err := New(s).Fire(ctx, FireParams{Rules: []Rule{rule}, Now: now})
		if err != nil || len(fired) != 1 {
			t.Fatalf("fired %v, %v", fired, err)
		}
		j, err := redrive.New(s).Job(ctx, fired[0].JobID)
		if err != nil || j.Total != 1 {
			t.Fatalf("job %+v, %v", j, err)
		}
		pub := &capture{}
		if j, err = redrive.New(s).ClaimJob(ctx, "test", 0, time.Now()); err != nil || j == nil {
			t.Fatalf("claim: %v %v", j, err)
		}
		if _, err := redrive.New(s).RunJob(ctx, j, redrive.JobRunParams{Holder: "test", Target: func(context.Context, string) (redrive.Publisher, error) { return pub, nil }}); err != nil {
			t.Fatal(err)
		}
		if len(pub.msgs) != 1 || pub.msgs[0].EventID != "old" {
			t.Fatalf("sent %+v", pub.msgs)
		}
		if again, _ := New(s).Fire(ctx, FireParams{Rules: []Rule{rule}, Now: now}); len(again) != 0 {
			t.Fatalf("fired again: %+v", again)
		}
		// Seen again later: the last ack time moves, the first stays.
		if err := New(s).RecordAckedVersion(ctx, "orders", "1.10.0", testNow); err != nil {
			t.Fatal(err)
		}
		if err := New(s).RecordAckedVersion(ctx, "orders", "1.10.0", testNow.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
		vs, err := New(s).AckedVersions(ctx, "orders")
		if err != nil || len(vs) != 2 || !vs[1].FirstAckedAt.Equal(fixedAt) || !vs[1].LastAckedAt.Equal(testNow) {
			t.Fatalf("acked versions %+v, %v", vs, err)
		}
	})
}
