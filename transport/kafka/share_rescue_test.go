package kafka_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestShareLateAnswerOnLastDelivery: a share fetch that the broker answers
// after the member's poll ended acquires a record on the group's last
// delivery; the member then stops, and its client's close releases the
// record unseen — the broker archives it (never delivered again, no copy
// anywhere). Lily must dead-letter the fetched copy instead: the DLT holds
// the record, byte for byte with its event ID, reason delivery_limit and
// the broker's count, and nothing is left in the group.
func TestShareLateAnswerOnLastDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newShareCluster(t, kfake.BrokerConfigs(map[string]string{kafka.BrokerShareDeliveryLimit: "2"}))
	tr := open(t, c, shareOptions, func(o *kafka.Options) { o.Partitions = 1 })
	name := fmt.Sprintf("share.late.%08x", rand.Uint32())
	group := "share." + name
	qc := lily.QueueConfig{Name: name, Transport: lily.TransportKafka, DeliveryLimit: new(1), KafkaShareGroup: group}.WithDefaults()
	declare(t, tr, qc)
	msg := lily.Message{Body: []byte("last"), Headers: map[string]any{"origin": "raw"}}
	if err := lily.Publish(ctx, tr, name, []lily.Message{msg}); err != nil {
		t.Fatal(err)
	}
	// A member outside Lily releases the record once: its next delivery is
	// the group's last (limit 2).
	var eventID string
	for _, h := range releaseOne(t, c, name, group).Headers {
		if h.Key == evidence.HeaderEventID {
			eventID = string(h.Value)
		}
	}
	if eventID == "" {
		t.Fatal("the released record carries no event ID")
	}

	// From now on the broker holds the first share fetch back until woken:
	// Lily's poll ends before the answer, which acquires the record.
	var armed atomic.Bool
	armed.Store(true)
	wake := make(chan struct{})
	c.ControlKey(kmsg.ShareFetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if armed.CompareAndSwap(true, false) {
			c.SleepControl(func() { <-wake })
		}
		return nil, nil, false
	})
	// The member joins the group before it fetches, which under load can
	// take longer than one receive: receive again until a fetch reached
	// the broker, each receive ending empty, its fetch held back.
	transporttest.WaitForState(t, "a share fetch of c1 to reach the broker", func() (bool, string) {
		ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: name, Max: 10, Wait: 300 * time.Millisecond, Consumer: "c1"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 0 {
			t.Fatalf("receive handed out %d records while the fetch was held back; the test needs the answer to come after the poll", len(ds))
		}
		return !armed.Load(), "no share fetch reached the broker yet"
	})
	close(wake)
	// The answer reaches the client and waits for a poll that never comes.
	transporttest.WaitForState(t, "the held-back answer to reach c1's client", func() (bool, string) {
		n := kafka.ShareUnseen(tr, name, "c1")
		return n == 1, fmt.Sprintf("%d fetched records no poll returned", n)
	})
	if err := tr.StopConsumer(ctx, &transport.StopParams{Queue: name, Consumer: "c1"}); err != nil {
		t.Fatal(err)
	}

	dls, err := tr.DeadLetters(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 {
		t.Fatalf("dead-letter topic holds %d records, want the record its client released unseen on its last delivery", len(dls))
	}
	d := dls[0]
	if d.EventID != eventID || string(d.Body) != "last" || d.Headers["origin"] != "raw" {
		t.Errorf("dead letter %s %q headers %v, want event %s, body last, header origin=raw", d.EventID, d.Body, d.Headers, eventID)
	}
	rec, err := evidence.Decode(d.Headers)
	if err != nil {
		t.Errorf("evidence: %v", err)
	}
	if rec.Reason != evidence.ReasonDeliveryLimit || rec.DeliveryCount != 2 || !rec.HasOffset || rec.SourceOffset != 0 {
		t.Errorf("evidence %+v, want reason delivery_limit, the broker's count 2 and offset 0", rec)
	}
	// Conservation: the record is dead-lettered once and the group has
	// nothing left to hand out.
	if more, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: name, Max: 10, Wait: time.Second, Consumer: "c2"}); err != nil || len(more) != 0 {
		t.Errorf("a new member received %d records (%v), want none: the broker archived the record", len(more), err)
	}
	if n, err := tr.InFlight(ctx, name); err != nil || n != 0 {
		t.Errorf("in flight at the end: %d (%v), want 0", n, err)
	}
}

// TestShareStrictPollHoldsOneRecord pins what a narrow member relies on:
// in record-limit mode (ShareMaxRecordsStrict, ShareMaxRecords 1) franz-go
// runs one share fetch at a time, so a poll returns at most one record
// even when several brokers lead partitions with records ready. Were it to
// fetch from every broker at once, a narrow member would hold one record
// per broker while a redelivered poison runs, and they would die with it.
func TestShareStrictPollHoldsOneRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newShareCluster(t) // three brokers
	tr := open(t, c, shareOptions, func(o *kafka.Options) { o.Partitions = 6 })
	name := fmt.Sprintf("share.strict.%08x", rand.Uint32())
	group := "share." + name
	qc := lily.QueueConfig{Name: name, Transport: lily.TransportKafka, KafkaShareGroup: group}.WithDefaults()
	declare(t, tr, qc)
	// Joining through Lily sets share.auto.offset.reset = earliest.
	if _, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: name, Max: 1, Wait: time.Millisecond, Consumer: "setup"}); err != nil {
		t.Fatal(err)
	}
	if err := tr.StopConsumer(ctx, &transport.StopParams{Queue: name, Consumer: "setup"}); err != nil {
		t.Fatal(err)
	}
	const n = 60
	msgs := make([]lily.Message, n)
	for i := range msgs {
		msgs[i] = lily.Message{Key: fmt.Sprintf("k%d", i), Body: []byte(fmt.Sprint(i))}
	}
	if err := lily.Publish(ctx, tr, name, msgs); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(name), kgo.ShareGroup(group),
		kgo.ShareMaxRecords(1), kgo.ShareMaxRecordsStrict(), kgo.FetchMaxWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	parts := map[int32]bool{}
	seen := map[string]bool{}
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for len(seen) < n && pctx.Err() == nil {
		rs := cl.PollRecords(pctx, -1).Records()
		if len(rs) > 1 {
			t.Fatalf("one poll returned %d records; a narrow member would hold them all", len(rs))
		}
		for _, r := range rs {
			seen[string(r.Value)] = true
			parts[r.Partition] = true
			r.Ack(kgo.AckAccept)
		}
	}
	if len(seen) != n {
		t.Fatalf("received %d of %d records", len(seen), n)
	}
	if len(parts) < 2 {
		t.Fatalf("records came from %d partition(s); the test needs several brokers' partitions", len(parts))
	}
	if err := cl.FlushAcks(pctx); err != nil {
		t.Fatal(err)
	}
	// Conservation: every record accepted once, nothing left in the group.
	if n, err := tr.InFlight(ctx, name); err != nil || n != 0 {
		t.Errorf("in flight at the end: %d (%v), want 0", n, err)
	}
}
