package ledger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/presence"
	"github.com/lily-mq/lily/transport"
)

// TestAccountedIsPresence: a consumer on an Accounted heartbeats into the
// catalog and learns its queue's pause through it, with nothing else
// wired (the runtime finds the transport.Presence on its transport).
func TestAccountedIsPresence(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		a := AccountWith(nopTransport{}, New(s), AccountOptions{Presence: presence.Options{Every: 10 * time.Millisecond}})
		t.Cleanup(func() { a.beat.Close() })
		var p transport.Presence = a
		st := transport.ConsumerState{Queue: "q", Instance: "i-1", Name: "svc", Version: "v3", Breaker: "closed"}
		p.ReportConsumer(ctx, st)
		cs, err := s.Consumers(ctx, "q", time.Now())
		if err != nil || len(cs) != 1 || cs[0].Instance != "i-1" || cs[0].Version != "v3" || cs[0].Paused {
			t.Fatalf("heartbeat after the first report: %+v, %v; want i-1 written at once", cs, err)
		}
		if paused, _ := p.QueuePaused("q"); paused {
			t.Fatal("q paused before anyone paused it")
		}
		if _, err := s.PauseQueue(ctx, "q", "test", "tester", time.Now()); err != nil {
			t.Fatal(err)
		}
		// A beat may read the pause before the test asks: the state and its
		// channel are read together, so wait only while it says not paused.
		for paused, changed := p.QueuePaused("q"); !paused; paused, changed = p.QueuePaused("q") {
			<-changed // closed by the beat that reads the pause
		}
		st.Paused = true
		p.ReportConsumer(ctx, st)
		waittest.ForState(t, "the heartbeat to say paused", func() (bool, string) {
			cs, err := s.Consumers(ctx, "q", time.Now())
			return err == nil && len(cs) == 1 && cs[0].Paused, fmt.Sprintf("%+v %v", cs, err)
		})
		st.Stopped = true
		p.ReportConsumer(ctx, st)
		if cs, err := s.Consumers(ctx, "q", time.Now()); err != nil || len(cs) != 0 {
			t.Errorf("heartbeat after a graceful stop: %+v, %v; want the row removed", cs, err)
		}
	})
}
