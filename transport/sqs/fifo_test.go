package sqs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqs/sqstest"
)

// TestFIFOGroupAndDeduplication: on a FIFO queue the key travels as
// MessageGroupId and comes back as the delivery's key; the event ID is
// the deduplication ID, so publishing the same event twice enqueues it
// once.
func TestFIFOGroupAndDeduplication(t *testing.T) {
	t.Parallel()
	tr := open(t)
	ctx := context.Background()
	qc := lily.QueueConfig{Name: fmt.Sprintf("fifo-%d.fifo", time.Now().UnixNano()), Transport: "sqs"}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	msgs := []lily.Message{{Key: "cust-1", Body: []byte("a")}}
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil { // the same event again
		t.Fatal(err)
	}
	if n := sqstest.Depth(qc.Name); n != 1 {
		t.Errorf("%d messages after publishing one event twice, want 1 (deduplication ID = event ID)", n)
	}
	ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 10, Wait: time.Second, Consumer: "fifo"})
	if err != nil || len(ds) != 1 {
		t.Fatalf("received %d (%v), want 1", len(ds), err)
	}
	if ds[0].Key != "cust-1" || ds[0].EventID != msgs[0].EventID {
		t.Errorf("delivery key %q event %s, want cust-1 %s", ds[0].Key, ds[0].EventID, msgs[0].EventID)
	}
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: ds[0], Action: transport.Ack}}}); err != nil {
		t.Fatal(err)
	}
	if n := sqstest.Depth(qc.Name); n != 0 {
		t.Errorf("%d messages after the ack, want 0", n)
	}
}
