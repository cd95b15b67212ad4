package presence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/presence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// pauseRig is a real consumer on the embedded SQLite transport whose
// heartbeats go to the transport's own catalog.
type pauseRig struct {
	tr    *sqlite.Transport
	cat   *catalog.Store
	beat  *presence.Beat
	queue lily.QueueConfig

	failing atomic.Bool // the handler's dependency is down

	mu     sync.Mutex
	seen   map[string]int // handler calls per event ID
	events []lily.EventKind
}

func newPauseRig(t *testing.T) *pauseRig {
	t.Helper()
	return newPauseRigWith(t, lily.QueueConfig{Name: "pause.orders"}.WithDefaults())
}

// newPauseRigWith is newPauseRig for the queue qc.
func newPauseRigWith(t *testing.T, qc lily.QueueConfig) *pauseRig {
	t.Helper()
	ctx := context.Background()
	tr, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "pause.db"), sqlite.Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	// A short interval keeps the test quick; the test waits on the rows
	// the beats write, never on the interval itself.
	beat := presence.New(cat, presence.Options{Every: 20 * time.Millisecond})
	t.Cleanup(func() { beat.Close() })
	return &pauseRig{tr: tr, cat: cat, beat: beat, queue: qc, seen: map[string]int{}}
}

func (r *pauseRig) publish(t *testing.T, from, n int) {
	t.Helper()
	msgs := make([]lily.Message, n)
	for i := range msgs {
		msgs[i] = lily.Message{EventID: fmt.Sprintf("evt-%03d", from+i), Body: []byte(fmt.Sprint(from + i))}
	}
	if err := lily.Publish(context.Background(), r.tr, r.queue.Name, msgs); err != nil {
		t.Fatal(err)
	}
}

// run starts the consumer; the returned function stops it and waits
// (once, however often it is called).
func (r *pauseRig) run(t *testing.T, instance string) func() {
	t.Helper()
	c, err := lily.NewConsumer(r.tr, lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		if r.failing.Load() {
			return errors.New("payments API: 503")
		}
		r.mu.Lock()
		r.seen[d.EventID]++
		r.mu.Unlock()
		return nil
	}), lily.ConsumerOptions{Queue: r.queue, Instance: instance, Name: "orders-svc", Version: "v7", Presence: r.beat,
		ReceiveWait: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Hooks: []lily.Hook{lily.HookFunc(func(_ context.Context, e lily.Event) {
			if e.Kind == lily.EventPaused || e.Kind == lily.EventResumed {
				r.mu.Lock()
				r.events = append(r.events, e.Kind)
				r.mu.Unlock()
			}
		})}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
}

// handled returns how many distinct event IDs the handler saw, and
// whether any was seen twice.
func (r *pauseRig) handled() (n int, dup string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, k := range r.seen {
		if k > 1 {
			dup = id
		}
	}
	return len(r.seen), dup
}

// heartbeat returns the instance's row, or nil.
func (r *pauseRig) heartbeat(t *testing.T, instance string) *catalog.Consumer {
	t.Helper()
	cs, err := r.cat.Consumers(context.Background(), r.queue.Name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i := range cs {
		if cs[i].Instance == instance {
			return &cs[i]
		}
	}
	return nil
}

// TestPauseHoldsConsumerUntilResume: a paused queue's consumer stops
// taking messages — those published during the pause wait in the queue
// while heartbeat after heartbeat shows the consumer alive and paused —
// and after resume every message is consumed once, acked, none lost.
func TestPauseHoldsConsumerUntilResume(t *testing.T) {
	r := newPauseRig(t)
	ctx := context.Background()
	stop := r.run(t, "orders-1")
	defer stop()

	r.publish(t, 0, 10)
	waittest.ForState(t, "the first 10 messages handled", func() (bool, string) {
		n, _ := r.handled()
		return n == 10, fmt.Sprintf("%d handled", n)
	})
	hb := r.heartbeat(t, "orders-1")
	if hb == nil || hb.Paused || hb.Name != "orders-svc" || hb.Version != "v7" || hb.Breaker != string(lily.BreakerClosed) || hb.PID == 0 || hb.Host == "" {
		t.Fatalf("heartbeat before the pause = %+v, want orders-svc v7 with host and pid, not paused, breaker closed", hb)
	}

	if ok, err := r.cat.PauseQueue(ctx, r.queue.Name, "test: dependency maintenance", "tester", time.Now()); err != nil || !ok {
		t.Fatalf("PauseQueue = %v, %v", ok, err)
	}
	waittest.ForState(t, "the heartbeat to show the consumer paused", func() (bool, string) {
		hb := r.heartbeat(t, "orders-1")
		return hb != nil && hb.Paused, fmt.Sprintf("%+v", hb)
	})
	r.publish(t, 10, 20)
	published := time.Now()
	// Several heartbeats after the publish, each written by the live
	// consumer while it holds the pause: by then an unpaused consumer
	// would have taken the messages many times over. A new heartbeat is
	// what shows the consumer alive; the row's Stale flag compares its
	// age with 3 heartbeats of 20 ms at the moment of the read, which a
	// loaded machine can pass between the write and the read.
	for beats := 0; beats < 5; beats++ {
		var hb *catalog.Consumer
		waittest.ForState(t, "a heartbeat after the publish", func() (bool, string) {
			hb = r.heartbeat(t, "orders-1")
			return hb != nil && hb.LastSeen.After(published), fmt.Sprintf("%+v", hb)
		})
		if !hb.Paused {
			t.Fatalf("heartbeat during the pause = %+v, want paused", hb)
		}
		published = hb.LastSeen
	}
	if n, _ := r.handled(); n != 10 {
		t.Fatalf("%d messages handled during the pause, want the 10 from before it", n)
	}
	if n, err := r.tr.InFlight(ctx, r.queue.Name); err != nil || n != 20 {
		t.Fatalf("in the queue during the pause: %d, %v; want the 20 published during it", n, err)
	}

	if ok, err := r.cat.ResumeQueue(ctx, r.queue.Name, "tester", time.Now()); err != nil || !ok {
		t.Fatalf("ResumeQueue = %v, %v", ok, err)
	}
	waittest.ForState(t, "all 30 messages handled after resume", func() (bool, string) {
		n, _ := r.handled()
		return n == 30, fmt.Sprintf("%d handled", n)
	})
	waittest.ForState(t, "the heartbeat to show the consumer running", func() (bool, string) {
		hb := r.heartbeat(t, "orders-1")
		return hb != nil && !hb.Paused, fmt.Sprintf("%+v", hb)
	})
	stop()
	if _, dup := r.handled(); dup != "" {
		t.Errorf("%s handled twice", dup)
	}
	r.mu.Lock()
	events := fmt.Sprint(r.events)
	r.mu.Unlock()
	if events != "[paused resumed]" {
		t.Errorf("hook events = %s, want [paused resumed]", events)
	}
	rows, err := ledger.New(r.cat).Rows(ctx, r.tr)
	if err != nil || len(rows) != 1 {
		t.Fatalf("ledger = %+v, %v", rows, err)
	}
	if l := rows[0]; l.Accepted != 30 || l.Acked != 30 || l.InFlight != 0 || !l.Balanced() {
		t.Errorf("ledger %+v: want 30 accepted, 30 acked, none in flight or lost", l)
	}
	if hb := r.heartbeat(t, "orders-1"); hb != nil {
		t.Errorf("heartbeat after a graceful stop = %+v, want the row removed", hb)
	}
}

// TestConsumerStartedOnPausedQueueTakesNothing: the pause is read before
// the first fetch, so a consumer started while its queue is paused takes
// nothing until it is resumed.
func TestConsumerStartedOnPausedQueueTakesNothing(t *testing.T) {
	r := newPauseRig(t)
	ctx := context.Background()
	r.publish(t, 0, 5)
	if _, err := r.cat.PauseQueue(ctx, r.queue.Name, "", "tester", time.Now()); err != nil {
		t.Fatal(err)
	}
	stop := r.run(t, "orders-2")
	defer stop()
	waittest.ForState(t, "the heartbeat to show the new consumer paused", func() (bool, string) {
		hb := r.heartbeat(t, "orders-2")
		return hb != nil && hb.Paused, fmt.Sprintf("%+v", hb)
	})
	if n, _ := r.handled(); n != 0 {
		t.Fatalf("%d messages handled on a paused queue, want 0", n)
	}
	if _, err := r.cat.ResumeQueue(ctx, r.queue.Name, "tester", time.Now()); err != nil {
		t.Fatal(err)
	}
	waittest.ForState(t, "all 5 handled after resume", func() (bool, string) {
		n, _ := r.handled()
		return n == 5, fmt.Sprintf("%d handled", n)
	})
}

// TestBeatPrunesDeadInstances: a row silent for longer than PruneAfter (a
// process that died long ago) is deleted by another process's heartbeat
// loop; a merely stale one stays, shown stale.
func TestBeatPrunesDeadInstances(t *testing.T) {
	r := newPauseRig(t)
	ctx := context.Background()
	now := time.Now()
	for _, c := range []*catalog.Consumer{
		{Instance: "dead-long-ago", Queue: r.queue.Name, HeartbeatMillis: 5000, StartedAt: now.Add(-72 * time.Hour), LastSeen: now.Add(-48 * time.Hour)},
		{Instance: "stale-recently", Queue: r.queue.Name, HeartbeatMillis: 5000, StartedAt: now.Add(-time.Hour), LastSeen: now.Add(-time.Hour)},
	} {
		if err := r.cat.Heartbeat(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	beat := presence.New(r.cat, presence.Options{Every: time.Millisecond, PruneAfter: 24 * time.Hour})
	defer beat.Close()
	beat.ReportConsumer(ctx, transport.ConsumerState{Queue: r.queue.Name, Instance: "alive"})
	waittest.ForState(t, "the long-dead instance pruned", func() (bool, string) {
		return r.heartbeat(t, "dead-long-ago") == nil, fmt.Sprintf("%+v", r.heartbeat(t, "dead-long-ago"))
	})
	if hb := r.heartbeat(t, "stale-recently"); hb == nil || !hb.Stale {
		t.Errorf("the recently silent instance = %+v, want it kept and shown stale", hb)
	}
	if hb := r.heartbeat(t, "alive"); hb == nil {
		t.Error("the pruning process's own instance is gone")
	}
}

// TestHeartbeatShowsBreaker: the heartbeat carries the breaker's state,
// which the runtime reports on every change: open while the dependency is
// down, closed again once it is back.
func TestHeartbeatShowsBreaker(t *testing.T) {
	qc := lily.QueueConfig{Name: "pause.breaker", RetryAttempts: 1, RetryBackoffMillis: new(int64(50)), MaxRetryBackoffMillis: new(int64(50)),
		BreakerMinRequests: new(3), BreakerCooldownMillis: new(int64(50))}.WithDefaults()
	r := newPauseRigWith(t, qc)
	r.failing.Store(true)
	stop := r.run(t, "breaker-1")
	defer stop()
	r.publish(t, 0, 10)
	waittest.ForState(t, "the heartbeat to show the breaker open", func() (bool, string) {
		hb := r.heartbeat(t, "breaker-1")
		return hb != nil && hb.Breaker == string(lily.BreakerOpen), fmt.Sprintf("%+v", hb)
	})
	r.failing.Store(false)
	waittest.ForState(t, "the heartbeat to show the breaker closed after the outage", func() (bool, string) {
		hb := r.heartbeat(t, "breaker-1")
		return hb != nil && hb.Breaker == string(lily.BreakerClosed), fmt.Sprintf("%+v", hb)
	})
}
