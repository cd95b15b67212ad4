package kafka_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport/kafka"
)

// TestShareOverLimitRunsAlone: a wide poll that returns a record past the
// queue's delivery_limit beside first-time records hands the over-limit
// record out alone, even to a consumer that is not cautious, and nothing
// else until it is settled. The runtime dead-letters such a record without
// a handler; were a first-time poison handed out beside it, its crash would
// take the record back to the broker past the archive limit, where it is
// archived with no copy anywhere (a demo lost one so under CI load).
func TestShareOverLimitRunsAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newShareCluster(t)
	tr := open(t, c, shareOptions, func(o *kafka.Options) { o.Partitions = 1 })
	name := fmt.Sprintf("share.over.%08x", rand.Uint32())
	group := "share." + name
	qc := lily.QueueConfig{Name: name, Transport: lily.TransportKafka, DeliveryLimit: new(1), KafkaShareGroup: group}.WithDefaults()
	declare(t, tr, qc)
	sc := newShareConsumer(t, tr, name, "c1")
	// A first-time record, so that the member has polled once.
	sc.publish("first")
	ds := sc.receiveSome()
	if len(ds) != 1 || string(ds[0].Body) != "first" {
		t.Fatalf("first receive %v, want [first@1]", bodies(ds))
	}
	sc.ack(ds)
	// Another member of the group releases "old" once: its next delivery
	// is its second, past delivery_limit 1.
	sc.publish("old")
	if r := releaseOne(t, c, name, group); string(r.Value) != "old" {
		t.Fatalf("the other member got %q, want old", r.Value)
	}
	sc.publish("fresh-1", "fresh-2")
	// Wait until the broker can hand out all three, then take them.
	over := sc.receiveSome()
	if len(over) != 1 || string(over[0].Body) != "old" || over[0].DeliveryCount != 2 {
		t.Fatalf("receive after the release %v, want [old@2] alone", bodies(over))
	}
	if more := sc.receive(500 * time.Millisecond); len(more) != 0 {
		t.Fatalf("while old@2 (past delivery_limit 1) is held, receive handed out %v; want nothing until it is settled", bodies(more))
	}
	sc.ack(over)
	fresh := sc.receiveAcked(2)
	if len(fresh) != 2 {
		t.Fatalf("after old was settled: %v, want fresh-1 and fresh-2", bodies(fresh))
	}
	if n, err := tr.InFlight(ctx, name); err != nil || n != 0 {
		t.Errorf("in flight at the end: %d (%v), want 0", n, err)
	}
}
