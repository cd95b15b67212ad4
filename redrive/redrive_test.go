package redrive

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// publisher records what a redrive publishes; fail makes it fail.
type publisher struct {
	got  []*transport.PublishParams
	fail error
}

func (p *publisher) Publish(_ context.Context, pp *transport.PublishParams) error {
	if p.fail != nil {
		return p.fail
	}
	p.got = append(p.got, pp)
	return nil
}

func redriveParams(pub *publisher) Params {
	return Params{Actor: "alice", Now: fixedNow,
		Target: func(context.Context, string) (Publisher, error) { return pub, nil }}
}

func TestRedrive(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		seed(t, s)
		// One more pending entry at max_redrives (2).
		maxed := catalog.NewEntry("orders.created", transport.Message{EventID: "e8", Body: []byte("b")},
			evidenceHeaders(evidence.ReasonPermanent, "T", "m", "v1", 1, 0, 2), "", testNow)
		if err := s.Insert(ctx, maxed); err != nil {
			t.Fatal(err)
		}
		pub := &publisher{}
		var seen []string
		p := redriveParams(pub)
		p.Filter = catalog.Filter{Queue: "orders.created", States: []catalog.State{catalog.StateDiscarded}} // States is ignored
		p.OnEntry = func(e catalog.EntryRef, outcome string) { seen = append(seen, e.EventID+":"+outcome) }
		res, err := New(s).Redrive(ctx, p)
		if err != nil {
			t.Fatalf("Redrive: %v", err)
		}
		if res.Selected != 3 || res.Redriven != 2 || res.NeedsManual != 1 {
			t.Errorf("result %+v, want 3 selected, 2 redriven, 1 needs_manual", res)
		}
		if !reflect.DeepEqual(seen, []string{"e8:needs_manual", "e1:redriven", "e2:redriven"}) {
			t.Errorf("OnEntry %v", seen)
		}
		// Published once, to the source queue, as a redrive, with the original
		// identity and body and fresh counters.
		if len(pub.got) != 1 || pub.got[0].Queue != "orders.created" || !pub.got[0].Redrive || len(pub.got[0].Messages) != 2 {
			t.Fatalf("published %+v", pub.got)
		}
		m := pub.got[0].Messages[0]
		if m.EventID != "e1" || m.Key != "k-e1" || m.Type != "order.created" || string(m.Body) != `{"id":"e1"}` {
			t.Errorf("message %+v", m)
		}
		if m.Headers[evidence.HeaderRetryCount] != int32(0) || m.Headers[evidence.HeaderRedriveCount] != int32(1) ||
			m.Headers["app"] == nil || m.Headers["traceparent"] == nil || m.Headers[evidence.HeaderReason] != nil {
			t.Errorf("headers %v: want x-retry-count 0, redrive count 1, originals kept, evidence removed", m.Headers)
		}
		st := states(t, s, catalog.Filter{EventIDs: []string{"e1", "e2", "e8"}})
		if st["e1"] != catalog.StateRedriven || st["e2"] != catalog.StateRedriven || st["e8"] != catalog.StateNeedsManual {
			t.Errorf("states %v", st)
		}
		e, err := s.Get(ctx, 1)
		if err != nil || e.RedriveCount != 1 || e.DecidedBy != "alice" || !e.DecidedAt.Equal(fixedNow()) || e.Decision != "sent to orders.created" {
			t.Errorf("redriven entry %+v (%v)", e, err)
		}
		recs := audit(t, s, catalog.AuditFilter{})
		if len(recs) != 2 || recs[0].Outcome != catalog.OutcomeNeedsManual || recs[1].Outcome != catalog.OutcomeRedriven ||
			!reflect.DeepEqual(recs[1].EventIDs, []string{"e1", "e2"}) || recs[1].Actor != "alice" || recs[0].Op != recs[1].Op ||
			!strings.Contains(recs[1].Selector, `"queue":"orders.created"`) || !strings.Contains(recs[0].Detail, "max_redrives") {
			t.Errorf("audit %+v", recs)
		}
		// Nothing pending is left: a second run selects nothing and says so.
		res, err = New(s).Redrive(ctx, p)
		if err != nil || res.Selected != 0 {
			t.Errorf("second Redrive = %+v, %v", res, err)
		}
		if recs := audit(t, s, catalog.AuditFilter{Op: res.Op}); len(recs) != 1 || recs[0].Outcome != catalog.OutcomeEmpty {
			t.Errorf("empty selection audit %+v", recs)
		}
	})
}

func TestRedriveDryRun(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		seed(t, s)
		pub := &publisher{}
		p := redriveParams(pub)
		p.DryRun = true
		p.MaxRedrives = func(q string) int { return 0 } // everything is at max
		before := states(t, s, catalog.Filter{})
		res, err := New(s).Redrive(ctx, p)
		if err != nil || res.Selected != 2 || res.NeedsManual != 2 || res.Redriven != 0 {
			t.Fatalf("dry run = %+v, %v", res, err)
		}
		if len(pub.got) != 0 || !reflect.DeepEqual(states(t, s, catalog.Filter{}), before) {
			t.Errorf("a dry run changed something: published %v", pub.got)
		}
		recs := audit(t, s, catalog.AuditFilter{})
		if len(recs) != 1 || !recs[0].DryRun || recs[0].Outcome != catalog.OutcomeWouldNeedManual || recs[0].Count != 2 {
			t.Errorf("dry run audit %+v", recs)
		}
	})
}

func TestRedriveFailures(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		seed(t, s)
		before := states(t, s, catalog.Filter{})
		// A queue that no longer exists: nothing is sent or changed.
		p := redriveParams(&publisher{})
		p.Target = func(_ context.Context, q string) (Publisher, error) {
			return nil, errors.New("queue " + q + ": " + transport.ErrUnknownQueue.Error())
		}
		_, err := New(s).Redrive(ctx, p)
		if err == nil || !strings.Contains(err.Error(), "orders.created") || !strings.Contains(err.Error(), "nothing was sent") {
			t.Errorf("Redrive to a missing queue = %v", err)
		}
		// The publish fails (e.g. nacked): the batch stays pending.
		pub := &publisher{fail: transport.ErrUnknownQueue}
		_, err2 := New(s).Redrive(ctx, redriveParams(pub))
		if !errors.Is(err2, transport.ErrUnknownQueue) || !strings.Contains(err2.Error(), "still pending") {
			t.Errorf("Redrive with a failing publish = %v", err2)
		}
		if !reflect.DeepEqual(states(t, s, catalog.Filter{}), before) {
			t.Errorf("a failed redrive changed entries")
		}
		recs := audit(t, s, catalog.AuditFilter{Action: catalog.ActionRedrive})
		if len(recs) != 2 || recs[0].Outcome != catalog.OutcomeFailed || recs[1].Outcome != catalog.OutcomeFailed ||
			!reflect.DeepEqual(recs[1].EventIDs, []string{"e1", "e2"}) || !strings.Contains(recs[1].Detail, "unknown queue") {
			t.Errorf("failure audit %+v", recs)
		}
		if _, err := New(s).Redrive(ctx, Params{}); err == nil {
			t.Error("Redrive without a Target accepted")
		}
	})
}

func TestRedriveRateAndLimit(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		var es []*catalog.Entry
		for i := range 40 {
			es = append(es, entry("q", "r"+string(rune('A'+i)), evidence.ReasonPermanent, catalog.StatePending, "x"))
		}
		if err := s.Insert(ctx, es...); err != nil {
			t.Fatal(err)
		}
		pub := &publisher{}
		p := redriveParams(pub)
		p.Rate, p.Limit = 200, 30
		var progress []int
		p.Progress = func(pr Progress) { progress = append(progress, pr.Done) }
		// What each batch asks of the bucket, seen as it asks: the rate
		// and burst it was made with and the tokens it holds then.
		type ask struct {
			limit  rate.Limit
			burst  int
			tokens float64
			n      int
		}
		var asks []ask
		rd := New(s)
		rd.waitN = func(ctx context.Context, lim *rate.Limiter, n int) error {
			asks = append(asks, ask{lim.Limit(), lim.Burst(), lim.Tokens(), n})
			return lim.WaitN(ctx, n)
		}
		res, err := rd.Redrive(ctx, p)
		if err != nil || res.Redriven != 30 {
			t.Fatalf("Redrive = %+v, %v", res, err)
		}
		// 200/s in batches of 20 (a tenth of a second) from a bucket of a
		// second's worth that starts empty, so that 30 messages cannot go
		// out in less than 150ms: the batches ask it for 20, then 10
		// tokens, and the first finds it far from full (a full bucket
		// would hold 200; an empty one refills at 200/s).
		if len(asks) != 2 || asks[0].n != 20 || asks[1].n != 10 {
			t.Fatalf("the batches asked the bucket for %+v, want 20 then 10 tokens", asks)
		}
		for _, a := range asks {
			if a.limit != 200 || a.burst != 200 {
				t.Errorf("bucket %v/s, burst %d; want 200/s, burst 200", a.limit, a.burst)
			}
		}
		if asks[0].tokens >= float64(asks[0].burst) {
			t.Errorf("the first batch found a full bucket (%.1f tokens): it must start empty", asks[0].tokens)
		}
		if !reflect.DeepEqual(progress, []int{20, 30}) {
			t.Errorf("progress %v, want batches of 20", progress)
		}
		if n := len(states(t, s, catalog.Filter{States: []catalog.State{catalog.StatePending}})); n != 10 {
			t.Errorf("%d pending after --limit 30 of 40, want 10", n)
		}
	})
}

func TestObserve(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		seed(t, s)
		since, err := s.LastID(ctx)
		if err != nil || since != 7 {
			t.Fatalf("LastID = %d, %v", since, err)
		}
		back, err := New(s).Observe(ctx, ObserveParams{Since: since, EventIDs: []string{"e1", "e2"}, Window: 30 * time.Millisecond, Poll: 5 * time.Millisecond})
		if err != nil || back != nil {
			t.Errorf("Observe of a quiet catalog = %v, %v", back, err)
		}
		ticks := 0
		back, err = New(s).Observe(ctx, ObserveParams{Since: since, EventIDs: []string{"e1", "e2"}, Window: time.Minute, Poll: time.Millisecond,
			Tick: func(ctx context.Context) error {
				if ticks++; ticks == 3 { // e.g. an ingest brings e2 back
					return s.Insert(ctx, entry("orders.created", "e2", evidence.ReasonPermanent, catalog.StatePending, "again"))
				}
				return nil
			}})
		if err != nil || len(back) != 1 || back[0].EventID != "e2" || back[0].ID != 8 {
			t.Fatalf("Observe = %+v, %v", back, err)
		}
		err = New(s).RecordObservation(ctx, "op1", "bob", []string{"e1", "e2"}, time.Minute, back)
		if err == nil || !strings.Contains(err.Error(), "e2 (entry 8") {
			t.Errorf("RecordObservation = %v", err)
		}
		if err := New(s).RecordObservation(ctx, "op1", "bob", []string{"e1"}, time.Minute, nil); err != nil {
			t.Error(err)
		}
		recs := audit(t, s, catalog.AuditFilter{Op: "op1"})
		if len(recs) != 2 || recs[0].Outcome != catalog.OutcomeStopped || recs[1].Outcome != catalog.OutcomeObserved || recs[1].Count != 1 {
			t.Errorf("observation audit %+v", recs)
		}
	})
}
