package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"
)

// committed returns the group's committed offset of partition 0 of topic
// (-1 when none).
func committed(t *testing.T, tr *kafka.Transport, group, topic string) int64 {
	t.Helper()
	offs, err := kadm.NewClient(tr.Client()).FetchOffsets(context.Background(), group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		t.Fatalf("fetch offsets: %v", err)
	}
	if o, ok := offs.Lookup(topic, 0); ok && o.Err == nil {
		return o.At
	}
	return -1
}

// runConsumer runs a lily consumer until the returned stop is called.
func runConsumer(t *testing.T, tr transport.Transport, qc lily.QueueConfig, h lily.Handler, hooks ...lily.Hook) (stop func()) {
	t.Helper()
	c, err := lily.NewConsumer(tr, h, lily.ConsumerOptions{Queue: qc, Concurrency: 2, Prefetch: 16,
		ReceiveWait: 50 * time.Millisecond, Hooks: hooks, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return transporttest.Start(t, c)
}

// TestUnconfirmedHandOffKeepsOffset makes the cluster fail every produce
// request to a queue's retry topic (or its dead-letter topic) and checks
// that the group's committed offset stays at the record whose hand-off was
// not confirmed, although the records behind it were acknowledged; once
// the topic takes writes again, the record is handed off and the offset
// moves past it.
func TestUnconfirmedHandOffKeepsOffset(t *testing.T) {
	for _, target := range []string{"retry", "dlt"} {
		t.Run(target, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, kfake.NumBrokers(1))
			setup := open(t, c, func(o *kafka.Options) { o.Partitions = 1 })
			// The consumer's produces give up after a second, so that a
			// refused hand-off fails its settlement soon.
			tr := open(t, c, func(o *kafka.Options) { o.ProduceTimeout = time.Second })
			ctx := context.Background()
			qc := lily.QueueConfig{Name: fmt.Sprintf("faults.%s.%08x", target, rand.Uint32()), Transport: lily.TransportKafka,
				RetryAttempts: 1, RetryBackoffMillis: new(int64(50)), DeliveryLimit: new(50)}.WithDefaults()
			declare(t, setup, qc)
			tr.Register(qc.Spec())
			msgs := make([]lily.Message, 5)
			for i := range msgs {
				msgs[i] = lily.Message{Key: "k", Body: []byte(fmt.Sprintf("m%d", i))}
			}
			msgs[1].Body = []byte("bad")
			if err := lily.Publish(ctx, setup, qc.Name, msgs); err != nil {
				t.Fatal(err)
			}
			faultTopic := kafka.RetryTopic(qc.Name, 50)
			if target == "dlt" {
				faultTopic = kafka.DeadLetterTopic(qc.Name)
			}
			fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: faultTopic, Err: kerr.NotEnoughReplicas, Count: -1})

			var mu sync.Mutex
			acked := map[string]bool{}
			var settleFailures atomic.Int64
			hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
				switch e.Kind {
				case lily.EventAcked:
					mu.Lock()
					acked[e.EventID] = true
					mu.Unlock()
				case lily.EventSettleFailed:
					settleFailures.Add(1)
				}
			})
			stop := runConsumer(t, tr, qc, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
				if string(d.Body) != "bad" {
					return nil
				}
				if target == "dlt" {
					return lily.Permanent(errors.New("bad data"))
				}
				if d.RetryCount == 0 {
					return errors.New("transient")
				}
				return nil
			}), hook)
			ackedCount := func() int {
				mu.Lock()
				defer mu.Unlock()
				return len(acked)
			}
			transporttest.WaitFor(t, "a failed hand-off and the records behind it acknowledged", func() bool {
				return settleFailures.Load() >= 1 && ackedCount() >= 4 && fault.Hits() >= 1
			})
			group := kafka.DefaultGroup(qc.Name)
			// The consumer commits in every Settle, before the settle's
			// events: the acks' commits are in. Check, then check again
			// after the next failed hand-off of the bad record — another
			// settle round, in which a commit past it would have shown.
			for round := range 2 {
				if round == 1 {
					failed := settleFailures.Load()
					transporttest.WaitForState(t, "another failed hand-off while the fault holds", func() (bool, string) {
						n := settleFailures.Load()
						return n > failed, fmt.Sprintf("%d settle failures, %d before", n, failed)
					})
				}
				switch got := committed(t, tr, group, qc.Name); {
				case got > 1:
					t.Fatalf("committed offset %d while the hand-off of offset 1 is unconfirmed: committed past it", got)
				case got < 1:
					t.Fatalf("committed offset %d, want 1: offset 0 was acknowledged before the fault", got)
				}
			}
			if n, err := tr.InFlight(ctx, qc.Name); err != nil || n < 1 {
				t.Errorf("in flight %d (%v) during the fault, want the unconfirmed original counted", n, err)
			}
			fault.Remove()
			switch target {
			case "retry":
				transporttest.WaitFor(t, "the retried record acknowledged", func() bool { return ackedCount() == 5 })
			case "dlt":
				transporttest.WaitFor(t, "the record dead-lettered", func() bool {
					ds, err := tr.DeadLetters(ctx, qc.Name)
					return err == nil && len(ds) == 1
				})
			}
			transporttest.WaitFor(t, "the offset committed past the record", func() bool { return committed(t, tr, group, qc.Name) == 5 })
			stop()
			if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
				t.Errorf("in flight %d (%v) at the end, want 0", n, err)
			}
			t.Logf("%d settlements failed while %s refused writes (%d produce requests faulted)", settleFailures.Load(), faultTopic, fault.Hits())
		})
	}
}
