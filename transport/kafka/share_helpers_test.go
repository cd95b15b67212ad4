package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"
)

// shareConsumer drives one consumer instance of a share-group queue by
// hand — Receive and Settle, as the runtime would — and counts what it
// acked, by body.
type shareConsumer struct {
	t               *testing.T
	tr              *kafka.Transport
	queue, consumer string
	acked           map[string]int
}

func newShareConsumer(t *testing.T, tr *kafka.Transport, queue, consumer string) *shareConsumer {
	return &shareConsumer{t: t, tr: tr, queue: queue, consumer: consumer, acked: map[string]int{}}
}

// publish publishes one message per body and returns them (with their
// event IDs).
func (c *shareConsumer) publish(bodies ...string) []lily.Message {
	c.t.Helper()
	msgs := make([]lily.Message, len(bodies))
	for i, b := range bodies {
		msgs[i] = lily.Message{Body: []byte(b)}
	}
	if err := lily.Publish(context.Background(), c.tr, c.queue, msgs); err != nil {
		c.t.Fatal(err)
	}
	return msgs
}

// receive is one Receive of up to 10 deliveries, waiting up to wait.
func (c *shareConsumer) receive(wait time.Duration) []*transport.Delivery {
	c.t.Helper()
	ds, err := c.tr.Receive(context.Background(), &transport.ReceiveParams{Queue: c.queue, Max: 10, Wait: wait, Consumer: c.consumer})
	if err != nil {
		c.t.Fatal(err)
	}
	return ds
}

// receiveSome receives until a Receive hands something out, failing the
// test after 30 s.
func (c *shareConsumer) receiveSome() []*transport.Delivery {
	c.t.Helper()
	var ds []*transport.Delivery
	transporttest.WaitFor(c.t, c.consumer+" to receive something", func() bool {
		ds = c.receive(time.Second)
		return len(ds) > 0
	})
	return ds
}

// receiveAcked receives and acks until at least n deliveries came, failing
// the test after 30 s, and returns them all.
func (c *shareConsumer) receiveAcked(n int) []*transport.Delivery {
	c.t.Helper()
	var all []*transport.Delivery
	transporttest.WaitForState(c.t, fmt.Sprintf("%s to receive %d deliveries", c.consumer, n), func() (bool, string) {
		got := c.receive(time.Second)
		c.ack(got)
		all = append(all, got...)
		return len(all) >= n, fmt.Sprintf("received %v", bodies(all))
	})
	return all
}

// ack acks ds.
func (c *shareConsumer) ack(ds []*transport.Delivery) {
	c.t.Helper()
	ss := make([]transport.Settlement, len(ds))
	for i, d := range ds {
		ss[i] = transport.Settlement{Delivery: d, Action: transport.Ack}
		c.acked[string(d.Body)]++
	}
	if err := c.tr.Settle(context.Background(), &transport.SettleParams{Settlements: ss}); err != nil {
		c.t.Fatal(err)
	}
}

// foreignShareMember is a member of the share group outside Lily (a bare
// franz-go client) that fetches up to max records at a time.
func foreignShareMember(t *testing.T, c *kfake.Cluster, topic, group string, max int32) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ShareGroup(group),
		kgo.ShareMaxRecords(max), kgo.ShareMaxRecordsStrict(), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// releaseOne lets a foreign member take one record and RELEASE it — its
// next delivery counts one more — then closes the member and returns the
// record.
func releaseOne(t *testing.T, c *kfake.Cluster, topic, group string) *kgo.Record {
	t.Helper()
	cl := foreignShareMember(t, c, topic, group, 1)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got *kgo.Record
	for got == nil && ctx.Err() == nil {
		for _, r := range cl.PollRecords(ctx, 1).Records() {
			r.Ack(kgo.AckRelease)
			got = r
		}
	}
	if got == nil {
		t.Fatal("the foreign member received nothing to release")
	}
	if err := cl.FlushAcks(ctx); err != nil {
		t.Fatal(err)
	}
	return got
}

// bodies names deliveries as body@count.
func bodies(ds []*transport.Delivery) (out []string) {
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s@%d", d.Body, d.DeliveryCount))
	}
	return out
}
