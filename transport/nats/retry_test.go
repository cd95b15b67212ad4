package nats_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestRetryCountSeparateFromDeliveryCount: a retry is a NAK with a delay,
// which the server counts as a delivery; Lily's retry record keeps the
// two apart. With delivery_limit 1 and 3 retries, a message that always
// fails transiently is handed to the handler 4 times, each with delivery
// count 1 and x-retry-count 0, 1, 2, 3, and is dead-lettered for
// retries_exhausted (never delivery_limit). Its retry record is gone once
// it is dead-lettered, and nothing is left in flight.
func TestRetryCountSeparateFromDeliveryCount(t *testing.T) {
	t.Parallel()
	tr := open(t)
	ctx := context.Background()
	qc := lily.QueueConfig{Name: fmt.Sprintf("retry-count-%d", time.Now().UnixNano()), Transport: "nats",
		DeliveryLimit: new(1), RetryAttempts: 3, RetryDelaysMillis: []int64{50, 100, 150}, Breaker: new(bool)}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.DeleteQueue(context.Background(), qc.Spec()) })
	msg := lily.Message{Body: []byte(`{"order":7}`)}
	pub := []lily.Message{msg}
	if err := lily.Publish(ctx, tr, qc.Name, pub); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []string
	var calls []string // what each call saw, for a failure to explain itself
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("delivery %d retry %d", d.DeliveryCount, d.RetryCount))
		calls = append(calls, fmt.Sprintf("\n\tevent %s stored at %s (another time: another copy in the stream), delivery %d, retry %d, headers %v",
			d.EventID, d.EnqueuedAt.Format(time.RFC3339Nano), d.DeliveryCount, d.RetryCount, d.Headers))
		mu.Unlock()
		return errors.New("dependency down")
	}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 100 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	stop := transporttest.Start(t, c)
	transporttest.WaitForState(t, "the message to be dead-lettered", func() (bool, string) {
		n, err := tr.DeadLetterDepth(ctx, qc.Name)
		mu.Lock()
		defer mu.Unlock()
		return err == nil && n == 1, fmt.Sprintf("dead letters %d (%v), handler calls %v", n, err, seen)
	})
	stop()
	want := []string{"delivery 1 retry 0", "delivery 1 retry 1", "delivery 1 retry 2", "delivery 1 retry 3"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("handler calls %v, want %v; the calls:%s", seen, want, strings.Join(calls, ""))
	}
	dls, err := tr.PeekDeadLetters(ctx, qc.Name, 0)
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %d (%v), want 1", len(dls), err)
	}
	rec, err := evidence.Decode(dls[0].Headers)
	if err != nil {
		t.Fatal(err)
	}
	if dls[0].EventID != pub[0].EventID || rec.Reason != evidence.ReasonRetriesExhausted || rec.RetryCount != 3 || rec.DeliveryCount != 1 {
		t.Errorf("dead letter %s: reason %s, retry count %d, delivery count %d; want %s, retries_exhausted, 3, 1",
			dls[0].EventID, rec.Reason, rec.RetryCount, rec.DeliveryCount, pub[0].EventID)
	}
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight %d (%v), want 0", n, err)
	}
	rs, err := tr.JetStream().Stream(ctx, nats.DefaultRetryStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := rs.Info(ctx, jetstream.WithSubjectFilter("lily.retries."+nats.StreamName(qc.Name)+".>"))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != 0 {
		t.Errorf("retry records left after the dead-lettering: %v", info.State.Subjects)
	}
}
