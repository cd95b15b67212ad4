package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/effecttest"
	"github.com/lily-mq/lily/outbox"
	"github.com/lily-mq/lily/transport"
)

// observed records what a relay told its observer.
type observed struct {
	mu        sync.Mutex
	published map[string]int
	failed    map[string]int
	rounds    int
}

func (o *observed) Published(q string, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.published[q] += n
}

func (o *observed) PublishFailed(q string, n int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil {
		panic("PublishFailed without an error")
	}
	o.failed[q] += n
}

func (o *observed) RoundFailed(error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rounds++
}

// TestBacklogAndObserver: Backlog counts the unpublished rows per queue
// (those whose publish failed as failing) with the oldest row's time, on
// every database kind; the relay's observer is told every confirmed and
// every failed row, per queue; once the outbox is drained the backlog is
// empty and the observer's confirmed rows equal the rows added.
func TestBacklogAndObserver(t *testing.T) {
	eachApp(t, func(t *testing.T, a app) {
		ctx := context.Background()
		if bs, err := outbox.Backlog(ctx, a.db); err != nil || len(bs) != 0 {
			t.Fatalf("empty outbox: backlog %+v, %v; want none", bs, err)
		}
		const q1, q2 = "orders.created", "payments.captured"
		before := time.Now().Add(-time.Second)
		for i := range 6 {
			q := q1
			if i%3 == 2 {
				q = q2
			}
			a.add(t, true, outbox.Message{Queue: q, Message: lily.Message{Key: fmt.Sprint("k", i%2), Body: fmt.Appendf(nil, "m%d", i),
				Headers: lily.Headers{"seq": int32(i)}}})
		}
		bs, err := outbox.Backlog(ctx, a.db)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 2 || bs[0].Queue != q1 || bs[0].Pending != 4 || bs[1].Queue != q2 || bs[1].Pending != 2 ||
			bs[0].Failing != 0 || bs[0].Oldest.Before(before) || bs[0].Oldest.After(time.Now()) {
			t.Fatalf("backlog %+v: want %s 4 pending, %s 2, none failing, oldest just now", bs, q1, q2)
		}

		// Every publish to q2 fails: q1's rows go, q2's stay and fail.
		tr := target(t, q1)
		qc := lily.QueueConfig{Name: q2}.WithDefaults()
		if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
			t.Fatal(err)
		}
		pub := &queueFail{Transport: tr, queue: q2}
		obs := &observed{published: map[string]int{}, failed: map[string]int{}}
		r, err := outbox.NewRelay(a.db, pub, outbox.RelayOptions{Logger: quiet, Observer: obs,
			MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		bs, err = outbox.Backlog(ctx, a.db)
		if err != nil {
			t.Fatal(err)
		}
		if len(bs) != 1 || bs[0].Queue != q2 || bs[0].Pending != 2 || bs[0].Failing != 2 {
			t.Fatalf("after a round with %s failing: backlog %+v, want only %s: 2 pending, 2 failing", q2, bs, q2)
		}
		if obs.published[q1] != 4 || obs.failed[q2] != 2 || obs.published[q2] != 0 {
			t.Fatalf("observer: published %v failed %v; want %s 4 confirmed, %s 2 failed", obs.published, obs.failed, q1, q2)
		}

		// q2 accepts again: everything is published, once.
		pub.queue = ""
		effecttest.RelayAll(t, r)
		if bs, err := outbox.Backlog(ctx, a.db); err != nil || len(bs) != 0 {
			t.Fatalf("drained outbox: backlog %+v, %v; want none", bs, err)
		}
		if n1, n2 := len(drain(t, tr, q1)), len(drain(t, tr, q2)); n1 != 4 || n2 != 2 || obs.published[q1] != 4 || obs.published[q2] != 2 {
			t.Fatalf("delivered %d to %s and %d to %s, observer confirmed %v; want 4, 2 and the same", n1, q1, n2, q2, obs.published)
		}
	})
}

// queueFail fails every publish to one queue (as a broker that refuses
// it); the others go through.
type queueFail struct {
	transport.Transport
	queue string
}

func (q *queueFail) Publish(ctx context.Context, p *transport.PublishParams) error {
	if p.Queue == q.queue {
		return fmt.Errorf("injected: %s refuses publishes", q.queue)
	}
	return q.Transport.Publish(ctx, p)
}
