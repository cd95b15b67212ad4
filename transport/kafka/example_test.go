package kafka_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
)

// Typed Lily headers become readable text on Kafka, plus a list of their
// types, and come back with the same Go types.
func ExampleEncodeHeaders() {
	rh, _ := kafka.EncodeHeaders(transport.Headers{evidence.HeaderRetryCount: int32(2), "tenant": "acme"})
	for _, h := range rh {
		fmt.Printf("%s: %s\n", h.Key, h.Value)
	}
	back := kafka.DecodeHeaders(rh)
	fmt.Printf("%T %v\n", back[evidence.HeaderRetryCount], back[evidence.HeaderRetryCount])
	// Output:
	// tenant: acme
	// x-retry-count: 2
	// x-lily-header-types: {"tenant":"str","x-retry-count":"i32"}
	// int32 2
}

// The topics of a queue with three retry buckets: and the return topic
// (retry.0ms), through which redrives reach the queue's group alone.
func ExamplePlan() {
	qc := lily.QueueConfig{Name: "orders.created", Transport: lily.TransportKafka, RetryAttempts: 3}.WithDefaults()
	for _, tp := range kafka.Plan(qc.Spec(), 6) {
		fmt.Println(tp.Role, tp.Name, tp.Partitions)
	}
	// Output:
	// main orders.created 6
	// retry orders.created.retry.1000ms 6
	// retry orders.created.retry.2000ms 6
	// retry orders.created.retry.4000ms 6
	// retry orders.created.retry.0ms 6
	// dlt orders.created.dlt 6
	// attempts orders.created.attempts 6
}

// A record handed out and never settled (its consumer died) comes back to
// the next consumer with its delivery count raised, read from the
// persistent attempt counter.
func ExampleTransport_Receive() {
	cluster, _ := kfake.NewCluster(kfake.NumBrokers(1))
	defer cluster.Close()
	ctx := context.Background()
	tr, err := kafka.Open(ctx, kafka.Options{Brokers: cluster.ListenAddrs(), Logger: quietLogger()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	qc := lily.QueueConfig{Name: "orders.created", Transport: lily.TransportKafka}.WithDefaults()
	tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}})
	lily.Publish(ctx, tr, qc.Name, []lily.Message{{Key: "cust-1", Body: []byte(`{"id":1}`)}})
	receive := func(consumer string) *transport.Delivery {
		for {
			ds, _ := tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 1, Wait: 100 * time.Millisecond, Consumer: consumer})
			if len(ds) == 1 {
				return ds[0]
			}
		}
	}
	d := receive("first")
	fmt.Println(d.Key, string(d.Body), "delivery", d.DeliveryCount)
	tr.RecoverLeases(ctx, &transport.RecoverParams{Consumer: "first"}) // as if it crashed
	d = receive("second")
	fmt.Println(d.Key, string(d.Body), "delivery", d.DeliveryCount)
	tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: d, Action: transport.Ack}}})
	// Output:
	// cust-1 {"id":1} delivery 1
	// cust-1 {"id":1} delivery 2
}
