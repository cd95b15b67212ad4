package nats_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/nats"
)

// TestOrderedQueueConsumer: an ordered queue's consumer hands out one
// message at a time (MaxAckPending 1), Verify reports a consumer declared
// for the other ordering, and an adopted consumer without MaxAckPending 1
// is refused for an ordered queue, naming the fix.
func TestOrderedQueueConsumer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	id := fmt.Sprintf("%08x", rand.Uint32())
	queue, adopted, stream := "ordered"+id+".postings", "ordered"+id+".adopted", "ORDERED_"+id
	tr := open(t, func(o *nats.Options) { o.Queues = map[string]nats.Binding{adopted: {Stream: stream, Consumer: "svc"}} })
	park := lily.QueueConfig{Name: queue, Transport: "nats", Ordering: lily.OrderingPark}.WithDefaults().Spec()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{park}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.DeleteQueue(context.Background(), park) })
	c, err := tr.JetStream().Consumer(ctx, nats.StreamName(queue), nats.DefaultConsumer)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.MaxAckPending; got != 1 {
		t.Errorf("ordered queue's consumer MaxAckPending = %d, want 1", got)
	}
	if diffs, err := tr.Verify(ctx, []transport.QueueSpec{park}); err != nil || len(diffs) != 0 {
		t.Errorf("verify of the ordered queue: %v %v, want none", diffs, err)
	}
	reorder := lily.QueueConfig{Name: queue, Transport: "nats"}.WithDefaults().Spec()
	diffs, err := tr.Verify(ctx, []transport.QueueSpec{reorder})
	if err != nil || len(diffs) != 1 || diffs[0].Setting != "max_ack_pending" || diffs[0].Got != "1" {
		t.Errorf("verify of the queue as reorder: %v %v, want max_ack_pending is 1", diffs, err)
	}

	js := tr.JetStream()
	adoptStream(t, js, stream, adopted, jetstream.ConsumerConfig{Durable: "svc", AckPolicy: jetstream.AckExplicitPolicy})
	block := lily.QueueConfig{Name: adopted, Transport: "nats", Ordering: lily.OrderingBlock}.WithDefaults().Spec()
	err = tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{block}})
	if !errors.Is(err, transport.ErrUnsafeQueue) || !strings.Contains(err.Error(), "--max-pending=1") {
		t.Fatalf("declare an ordered queue on a consumer with MaxAckPending 1000: %v, want ErrUnsafeQueue naming the fix", err)
	}
	if _, err := js.UpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "svc", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{block}}); err != nil {
		t.Errorf("declare an ordered queue on a consumer with MaxAckPending 1: %v", err)
	}
	t.Cleanup(func() { tr.DeleteQueue(context.Background(), block) })
	if diffs, err := tr.Verify(ctx, []transport.QueueSpec{block}); err != nil || len(diffs) != 0 {
		t.Errorf("verify of the adopted ordered queue: %v %v, want none", diffs, err)
	}
}
