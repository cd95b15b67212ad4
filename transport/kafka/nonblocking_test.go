package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestRetryDoesNotBlockPartition fails the first record of a partition
// once, with a 3s retry delay: the records behind it are processed and
// committed at once while the copy waits in the retry topic, whose
// partition is paused (not fetched) until the copy is due; the copy comes
// back to the handler no earlier than due, with x-retry-count 1, the
// original's partition and offset, and delivery count 1.
func TestRetryDoesNotBlockPartition(t *testing.T) {
	t.Parallel()
	const delay = 3 * time.Second
	ctx := context.Background()
	c := newCluster(t, kfake.NumBrokers(1))
	tr := open(t, c, func(o *kafka.Options) { o.Partitions = 1 })
	qc := lily.QueueConfig{Name: fmt.Sprintf("nonblocking.%08x", rand.Uint32()), Transport: lily.TransportKafka,
		RetryAttempts: 1, RetryBackoffMillis: new(delay.Milliseconds())}.WithDefaults()
	declare(t, tr, qc)
	retryTopic := kafka.RetryTopic(qc.Name, delay.Milliseconds())
	fetches := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: retryTopic, Observe: true, Count: -1})
	defer fetches.Remove()
	mainFetches := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: qc.Name, Observe: true, Count: -1})
	defer mainFetches.Remove()
	msgs := make([]lily.Message, 10)
	for i := range msgs {
		msgs[i] = lily.Message{Key: "same-key", Body: []byte(fmt.Sprintf("m%d", i))}
	}
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var failedAt, retriedAt time.Time
	var retried *lily.Delivery
	others := 0
	retriedEvent := make(chan time.Time, 1)
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		if e.Kind == lily.EventRetried {
			retriedEvent <- time.Now()
		}
	})
	stop := runConsumer(t, tr, qc, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if d.EventID != msgs[0].EventID {
			others++
			return nil
		}
		if failedAt.IsZero() {
			failedAt = time.Now()
			return errors.New("dependency blip")
		}
		retriedAt, retried = time.Now(), d
		return nil
	}), hook)
	<-retriedEvent
	// copyBack reports whether the failed record's copy reached the
	// handler: the events below must come before it.
	copyBack := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return retried != nil
	}
	transporttest.WaitFor(t, "the records behind the failed one processed and committed", func() bool {
		mu.Lock()
		n := others
		mu.Unlock()
		return n >= 9 && committed(t, tr, kafka.DefaultGroup(qc.Name), qc.Name) == 10
	})
	if copyBack() {
		t.Fatalf("the partition moved past the failed record only after its copy came back (%s later): the retry blocked it", delay)
	}
	// Once the copy has been fetched, its partition is paused: records
	// arriving on the main topic end each long-poll fetch, and the
	// requests that follow leave the retry partition out. Look for five
	// such records, each followed by a fetch of the main topic that came
	// after the publish (one that returns it, or the next long poll),
	// without a fetch of the retry topic, before the copy comes back (its
	// partition resumes when the copy is due; a round that spans the
	// resume sees its fetch and does not count).
	paused := false
	for i := 0; !paused && !copyBack(); i++ {
		before := fetches.Hits()
		for j := range 5 {
			n := mainFetches.Hits()
			if err := lily.Publish(ctx, tr, qc.Name, []lily.Message{{Key: "later", Body: []byte(fmt.Sprintf("later-%d-%d", i, j))}}); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := mainFetches.Wait(wctx, n+1)
			cancel()
			if err != nil {
				t.Fatalf("waiting for the main topic's fetches after later-%d-%d: %v (%d fetches, %d before)", i, j, err, mainFetches.Hits(), n)
			}
		}
		paused = fetches.Hits() == before
	}
	if !paused {
		t.Errorf("%s was fetched all the while its copy waited: the partition is not paused", retryTopic)
	}
	transporttest.WaitFor(t, "the retried copy", copyBack)
	stop()
	mu.Lock()
	defer mu.Unlock()
	// The due time travels in whole milliseconds (x-lily-due-at, UnixMilli):
	// up to 1 ms early against the handler's clock, as the shared suite's
	// DelayHonoured allows for.
	if gap := retriedAt.Sub(failedAt); gap < delay-2*time.Millisecond {
		t.Errorf("retried %s after the failure, before its %s delay", gap, delay)
	}
	if retried.RetryCount != 1 || retried.DeliveryCount != 1 {
		t.Errorf("retried copy: retry count %d delivery count %d, want 1 and 1", retried.RetryCount, retried.DeliveryCount)
	}
	if _, leaked := retried.Headers[kafka.HeaderDueAt]; leaked {
		t.Error("the transport's due-time header reached the handler")
	}
	if _, leaked := retried.Headers[evidence.HeaderSourceOffset]; leaked {
		t.Error("the transport's source-offset header reached the handler")
	}
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight %d (%v), want 0", n, err)
	}
}
