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
	sc := newShareConsumer(t, tr, name, "c1")
	// A first-time record: the new member fetches wide.
	sc.publish("first")
	sc.ack(sc.receiveSome())
	// Another member of the group takes four records and gives them back
	// unacknowledged, as a member that crashed would: each comes back with
	// count 2. The fourth comes from a producer outside Lily: no event ID,
	// a plain-text header of its own.
	msgs := sc.publish("a", "b", "c")
	raw := &kgo.Record{Topic: name, Value: []byte("d"), Headers: []kgo.RecordHeader{{Key: "origin", Value: []byte("raw")}}}
	if err := tr.Client().ProduceSync(ctx, raw).FirstErr(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"d": fmt.Sprintf("%s/0/%d", name, raw.Offset)} // body → event ID
	for _, m := range msgs {
		want[string(m.Body)] = m.EventID
	}
	offsets := map[string]int64{"a": 1, "b": 2, "c": 3, "d": raw.Offset}
	cl := foreignShareMember(t, c, name, group, 10)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// One poll takes all four (they were produced before the member
	// joined). The member then leaves without acknowledging them: its
	// client releases them once it fetches no more (released while it
	// still fetched, a record could be taken again and come back with
	// count 3).
	var rs []*kgo.Record
	for len(rs) == 0 && pctx.Err() == nil {
		rs = cl.PollRecords(pctx, -1).Records()
	}
	if len(rs) != len(want) {
		t.Fatalf("the other member's first poll took %d records, want all %d", len(rs), len(want))
	}
	cl.Close()

	got := sc.receiveSome()
	if len(got) != 1 || got[0].DeliveryCount != 2 {
		t.Fatalf("first receive after the releases: %d deliveries %v, want one redelivery (count 2) alone", len(got), bodies(got))
	}
	if n, err := tr.InFlight(ctx, name); err != nil || n != 4 {
		t.Errorf("in flight while one runs and three were given back: %d (%v), want 4", n, err)
	}
	sc.ack(got)
	all := append(append([]*transport.Delivery(nil), got...), sc.receiveAcked(len(want)-len(got))...)
	if len(all) != len(want) {
		t.Fatalf("received %v, want a, b, c and d", bodies(all))
	}
	for _, d := range all {
		b := string(d.Body)
		if d.EventID != want[b] || d.DeliveryCount != 2 || !d.HasOffset || d.Offset != offsets[b] {
			t.Errorf("delivery %s event %s count %d offset %d, want event %s, count 2 and offset %d", b, d.EventID, d.DeliveryCount, d.Offset, want[b], offsets[b])
		}
		if v, ok := d.Headers["origin"].([]byte); b == "d" && (!ok || string(v) != "raw") {
			t.Errorf("the foreign record's headers %v, want origin kept as it came (the bytes raw)", d.Headers)
		}
		if _, ok := d.Headers["x-lily-prior-deliveries"]; ok {
			t.Errorf("delivery %s still carries x-lily-prior-deliveries: the transport must remove it", d.Body)
		}
	}
	// Conservation: every record acked exactly once, nothing dead-lettered,
	// nothing left in the share group or the give-back topic.
	for _, b := range []string{"first", "a", "b", "c", "d"} {
		if sc.acked[b] != 1 {
			t.Errorf("%s acked %d times, want once", b, sc.acked[b])
		}
	}
	if more := sc.receive(time.Second); len(more) != 0 {
		t.Errorf("after everything was acked, receive handed out %v", bodies(more))
	}
	if dls, err := tr.DeadLetters(ctx, name); err != nil || len(dls) != 0 {
		t.Errorf("dead letters: %d (%v), want none", len(dls), err)
	}
	if n, err := tr.InFlight(ctx, name); err != nil || n != 0 {
		t.Errorf("in flight at the end: %d (%v), want 0", n, err)
	}
}
