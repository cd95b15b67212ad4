package catalog

import (
	"context"
	"testing"
	"time"
)

// TestConsumersHeartbeatStalePrune: a heartbeat is one row per instance
// however often it beats; an instance past StaleBeats intervals is listed
// stale, not removed; pruning removes only rows older than its bound, and a
// graceful stop removes the instance's row.
func TestConsumersHeartbeatStalePrune(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		t0 := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
		live := &Consumer{Instance: "a-1", Queue: "orders", Name: "orders-svc", Version: "v1", Host: "h1", PID: 10,
			Breaker: "closed", HeartbeatMillis: 1000, StartedAt: t0, LastSeen: t0}
		dead := &Consumer{Instance: "b-2", Queue: "orders", Name: "orders-svc", Version: "v0", Host: "h2", PID: 20,
			Breaker: "open", HeartbeatMillis: 1000, StartedAt: t0, LastSeen: t0}
		for _, c := range []*Consumer{live, dead} {
			if err := s.Heartbeat(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		for i := 1; i <= 5; i++ { // live keeps beating: still one row
			live.LastSeen, live.Paused = t0.Add(time.Duration(i)*time.Second), i == 5
			if err := s.Heartbeat(ctx, live); err != nil {
				t.Fatal(err)
			}
		}
		now := t0.Add(5 * time.Second)
		cs, err := s.Consumers(ctx, "", now)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 2 {
			t.Fatalf("consumers = %+v, want the two instances once each", cs)
		}
		a, b := cs[0], cs[1]
		if a.Instance != "a-1" || a.Stale || !a.Paused || !a.LastSeen.Equal(now) || a.PID != 10 || a.Version != "v1" {
			t.Errorf("live instance = %+v, want a-1 seen at %s, paused, not stale", a, now)
		}
		if b.Instance != "b-2" || !b.Stale || b.Breaker != "open" || !b.StartedAt.Equal(t0) {
			t.Errorf("silent instance = %+v, want b-2 stale (5 s past a 1 s heartbeat), breaker open", b)
		}
		if cs, _ := s.Consumers(ctx, "payments", now); len(cs) != 0 {
			t.Errorf("consumers of payments = %+v, want none", cs)
		}
		n, err := s.PruneConsumers(ctx, t0.Add(time.Second))
		if err != nil || n != 1 {
			t.Fatalf("PruneConsumers = %d, %v; want the one row last seen before the bound", n, err)
		}
		if err := s.RemoveConsumer(ctx, "a-1"); err != nil {
			t.Fatal(err)
		}
		if cs, _ := s.Consumers(ctx, "", now); len(cs) != 0 {
			t.Errorf("after prune and remove: %+v, want none", cs)
		}
	})
}

// TestPauseResumeAudited: pausing and resuming a queue are decisions with
// an audit record each, repeated requests change nothing and say so.
func TestPauseResumeAudited(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
		if ok, err := s.PauseQueue(ctx, "orders", "payments API down", "alice", now); err != nil || !ok {
			t.Fatalf("PauseQueue = %v, %v; want paused", ok, err)
		}
		if ok, err := s.PauseQueue(ctx, "orders", "again", "bob", now); err != nil || ok {
			t.Fatalf("second PauseQueue = %v, %v; want already paused", ok, err)
		}
		ps, err := s.Pauses(ctx)
		if err != nil || len(ps) != 1 || ps[0].Queue != "orders" || ps[0].Reason != "payments API down" || ps[0].Actor != "alice" || !ps[0].PausedAt.Equal(now) {
			t.Fatalf("Pauses = %+v, %v; want orders paused by alice with the first reason", ps, err)
		}
		if ok, err := s.ResumeQueue(ctx, "orders", "carol", now); err != nil || !ok {
			t.Fatalf("ResumeQueue = %v, %v; want resumed", ok, err)
		}
		if ok, err := s.ResumeQueue(ctx, "orders", "carol", now); err != nil || ok {
			t.Fatalf("second ResumeQueue = %v, %v; want not paused", ok, err)
		}
		if ps, _ := s.Pauses(ctx); len(ps) != 0 {
			t.Fatalf("Pauses after resume = %+v, want none", ps)
		}
		var got []string
		err = s.EachAudit(ctx, AuditFilter{}, func(r *AuditRecord) error {
			if r.Action == ActionPause || r.Action == ActionResume {
				got = append(got, r.Actor+" "+r.Action+" "+r.Outcome+" "+r.Selector+" "+r.Detail)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			`alice pause paused {"queue":"orders"} payments API down`,
			`bob pause already_paused {"queue":"orders"} again`,
			`carol resume resumed {"queue":"orders"} `,
			`carol resume not_paused {"queue":"orders"} `,
		}
		if len(got) != len(want) {
			t.Fatalf("audit = %q, want %q", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("audit[%d] = %q, want %q", i, got[i], want[i])
			}
		}
	})
}
