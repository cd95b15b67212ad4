package kafka_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
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
	publish := func(bodies ...string) {
		t.Helper()
		msgs := make([]lily.Message, len(bodies))
		for i, b := range bodies {
			msgs[i] = lily.Message{Body: []byte(b)}
		}
		if err := lily.Publish(ctx, tr, name, msgs); err != nil {
			t.Fatal(err)
		}
	}
	receive := func(wait time.Duration) []*transport.Delivery {
		t.Helper()
		ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: name, Max: 10, Wait: wait, Consumer: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	ack := func(ds []*transport.Delivery) {
		t.Helper()
		ss := make([]transport.Settlement, len(ds))
		for i, d := range ds {
			ss[i] = transport.Settlement{Delivery: d, Action: transport.Ack}
		}
		if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
			t.Fatal(err)
		}
	}
	bodies := func(ds []*transport.Delivery) (out []string) {
		for _, d := range ds {
			out = append(out, fmt.Sprintf("%s@%d", d.Body, d.DeliveryCount))
		}
		return out
	}
	// A new member fetches one record at a time; a first-time record from
	// the one partition widens it.
	publish("first")
	var ds []*transport.Delivery
	for deadline := time.Now().Add(30 * time.Second); len(ds) == 0 && time.Now().Before(deadline); {
		ds = receive(time.Second)
	}
	if len(ds) != 1 || string(ds[0].Body) != "first" {
		t.Fatalf("first receive %v, want [first@1]", bodies(ds))
	}
	ack(ds)
	// Another member of the group releases "old" once: its next delivery
	// is its second, past delivery_limit 1.
	publish("old")
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(name), kgo.ShareGroup(group),
		kgo.ShareMaxRecords(1), kgo.ShareMaxRecordsStrict(), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for released := false; !released && pctx.Err() == nil; {
		for _, r := range cl.PollRecords(pctx, 1).Records() {
			if string(r.Value) != "old" {
				t.Fatalf("the other member got %q, want old", r.Value)
			}
			r.Ack(kgo.AckRelease)
			released = true
		}
	}
	if err := cl.FlushAcks(pctx); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	publish("fresh-1", "fresh-2")
	// Wait until the broker can hand out all three, then take them.
	var over []*transport.Delivery
	for deadline := time.Now().Add(30 * time.Second); len(over) == 0 && time.Now().Before(deadline); {
		over = receive(time.Second)
	}
	if len(over) != 1 || string(over[0].Body) != "old" || over[0].DeliveryCount != 2 {
		t.Fatalf("receive after the release %v, want [old@2] alone", bodies(over))
	}
	if more := receive(500 * time.Millisecond); len(more) != 0 {
		t.Fatalf("while old@2 (past delivery_limit 1) is held, receive handed out %v; want nothing until it is settled", bodies(more))
	}
	ack(over)
	var fresh []*transport.Delivery
	for deadline := time.Now().Add(30 * time.Second); len(fresh) < 2 && time.Now().Before(deadline); {
		got := receive(time.Second)
		ack(got)
		fresh = append(fresh, got...)
	}
	if len(fresh) != 2 {
		t.Fatalf("after old was settled: %v, want fresh-1 and fresh-2", bodies(fresh))
	}
	if n, err := tr.InFlight(ctx, name); err != nil || n != 0 {
		t.Errorf("in flight at the end: %d (%v), want 0", n, err)
	}
}
