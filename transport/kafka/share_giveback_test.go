package kafka_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
)

// TestShareGiveBackRedeliveries: a member fetching wide that receives
// several redeliveries in one poll keeps the first and gives the others
// back through the give-back topic — copies carrying their counts, then
// the originals accepted — so that while the one runs it holds nothing a
// crash would take down with it. The copies come back through the queue's
// consumer group with the broker's count going on, the same event IDs and
// the originals' coordinates; everything is acked once, nothing is left.
func TestShareGiveBackRedeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newShareCluster(t)
	tr := open(t, c, shareOptions, func(o *kafka.Options) { o.Partitions = 1 })
	name := fmt.Sprintf("share.giveback.%08x", rand.Uint32())
	group := "share." + name
	qc := lily.QueueConfig{Name: name, Transport: lily.TransportKafka, KafkaShareGroup: group}.WithDefaults() // no retries: the give-back topic is there anyway
	declare(t, tr, qc)
	receive := func(wait time.Duration) []*transport.Delivery {
		t.Helper()
		ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: name, Max: 10, Wait: wait, Consumer: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	acked := map[string]int{}
	ack := func(ds []*transport.Delivery) {
		t.Helper()
		ss := make([]transport.Settlement, len(ds))
		for i, d := range ds {
			ss[i] = transport.Settlement{Delivery: d, Action: transport.Ack}
			acked[string(d.Body)]++
		}
		if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
			t.Fatal(err)
		}
	}
	// A first-time record from the one partition widens the new member.
	first := lily.Message{Body: []byte("first")}
	if err := lily.Publish(ctx, tr, name, []lily.Message{first}); err != nil {
		t.Fatal(err)
	}
	var ds []*transport.Delivery
	for deadline := time.Now().Add(30 * time.Second); len(ds) == 0 && time.Now().Before(deadline); {
		ds = receive(time.Second)
	}
	ack(ds)
	// Another member of the group takes three records and gives them back
	// unacknowledged, as a member that crashed would: each comes back with
	// count 2.
	msgs := []lily.Message{{Body: []byte("a")}, {Body: []byte("b")}, {Body: []byte("c")}}
	if err := lily.Publish(ctx, tr, name, msgs); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(name), kgo.ShareGroup(group),
		kgo.ShareMaxRecords(10), kgo.ShareMaxRecordsStrict(), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// One poll takes all three (they were produced before the member
	// joined). The member then leaves without acknowledging them: its
	// client releases them once it fetches no more (released while it
	// still fetched, a record could be taken again and come back with
	// count 3).
	var rs []*kgo.Record
	for len(rs) == 0 && pctx.Err() == nil {
		rs = cl.PollRecords(pctx, -1).Records()
	}
	if len(rs) != len(msgs) {
		t.Fatalf("the other member's first poll took %d records, want all %d", len(rs), len(msgs))
	}
	cl.Close()

	var got []*transport.Delivery
	for deadline := time.Now().Add(30 * time.Second); len(got) == 0 && time.Now().Before(deadline); {
		got = receive(time.Second)
	}
	if len(got) != 1 || got[0].DeliveryCount != 2 {
		t.Fatalf("first receive after the releases: %d deliveries %v, want one redelivery (count 2) alone", len(got), bodies(got))
	}
	if n, err := tr.InFlight(ctx, name); err != nil || n != 3 {
		t.Errorf("in flight while one runs and two were given back: %d (%v), want 3", n, err)
	}
	ack(got)
	all := append([]*transport.Delivery(nil), got...)
	for deadline := time.Now().Add(30 * time.Second); len(all) < len(msgs) && time.Now().Before(deadline); {
		more := receive(time.Second)
		ack(more)
		all = append(all, more...)
	}
	if len(all) != len(msgs) {
		t.Fatalf("received %v, want a, b and c", bodies(all))
	}
	for _, d := range all {
		i := slices.IndexFunc(msgs, func(m lily.Message) bool { return string(m.Body) == string(d.Body) })
		if i < 0 || d.EventID != msgs[i].EventID || d.DeliveryCount != 2 || !d.HasOffset || d.Offset != int64(i+1) {
			t.Errorf("delivery %s event %s count %d offset %d, want its event ID, count 2 and offset %d", d.Body, d.EventID, d.DeliveryCount, d.Offset, i+1)
		}
		if _, ok := d.Headers["x-lily-prior-deliveries"]; ok {
			t.Errorf("delivery %s still carries x-lily-prior-deliveries: the transport must remove it", d.Body)
		}
	}
	// Conservation: every record acked exactly once, nothing dead-lettered,
	// nothing left in the share group or the give-back topic.
	for _, b := range []string{"first", "a", "b", "c"} {
		if acked[b] != 1 {
			t.Errorf("%s acked %d times, want once", b, acked[b])
		}
	}
	if more := receive(time.Second); len(more) != 0 {
		t.Errorf("after everything was acked, receive handed out %v", bodies(more))
	}
	if dls, err := tr.DeadLetters(ctx, name); err != nil || len(dls) != 0 {
		t.Errorf("dead letters: %d (%v), want none", len(dls), err)
	}
	if n, err := tr.InFlight(ctx, name); err != nil || n != 0 {
		t.Errorf("in flight at the end: %d (%v), want 0", n, err)
	}
}

// bodies names deliveries as body@count.
func bodies(ds []*transport.Delivery) (out []string) {
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s@%d", d.Body, d.DeliveryCount))
	}
	return out
}
