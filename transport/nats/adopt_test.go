package nats_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestAdoptedStreamAndConsumer: a queue bound to a stream and consumer
// that exist (nats.Options.Queues) is checked, not declared — a consumer
// without explicit acks is refused as unsafe — and consumed like Lily's
// own: one message acked, one dead-lettered to the dead-letter stream
// Declare made. A redrive (Direct) reaches the consumer alone, and is
// refused once another consumer of the stream reads the subject too.
func TestAdoptedStreamAndConsumer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	id := fmt.Sprintf("%08x", rand.Uint32())
	stream, queue := "ADOPT_"+id, "adopt"+id+".orders"
	tr := open(t, func(o *nats.Options) {
		o.Queues = map[string]nats.Binding{queue: {Stream: stream, Consumer: "svc"}, queue + ".unsafe": {Stream: stream, Consumer: "fire-and-forget"}}
	})
	js := tr.JetStream()
	adoptStream(t, js, stream, "adopt"+id+".>",
		jetstream.ConsumerConfig{Durable: "svc", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: queue},
		jetstream.ConsumerConfig{Durable: "fire-and-forget", AckPolicy: jetstream.AckNonePolicy, FilterSubject: queue + ".unsafe"})
	qc := lily.QueueConfig{Name: queue, Transport: "nats", Breaker: new(bool)}.WithDefaults()
	unsafe := lily.QueueConfig{Name: queue + ".unsafe", Transport: "nats"}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{unsafe.Spec()}}); !errors.Is(err, transport.ErrUnsafeQueue) {
		t.Errorf("declare an AckNone consumer: %v, want ErrUnsafeQueue", err)
	}
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.DeleteQueue(context.Background(), qc.Spec()) })
	if s, err := js.Stream(ctx, stream); err != nil || s.CachedInfo().Config.Subjects[0] != "adopt"+id+".>" {
		t.Fatalf("the adopted stream was changed: %v", err)
	}
	pub := []lily.Message{{Body: []byte("ok")}, {Body: []byte("bad")}}
	if err := lily.Publish(ctx, tr, queue, pub); err != nil {
		t.Fatal(err)
	}
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		if string(d.Body) == "bad" {
			return lily.Permanent(errors.New("bad order"))
		}
		return nil
	}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 100 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	stop := transporttest.Start(t, c)
	transporttest.WaitForState(t, "one acked, one dead-lettered", func() (bool, string) {
		n, err1 := tr.InFlight(ctx, queue)
		dl, err2 := tr.DeadLetterDepth(ctx, queue)
		return err1 == nil && err2 == nil && n == 0 && dl == 1, fmt.Sprintf("in flight %d (%v), dead letters %d (%v)", n, err1, dl, err2)
	})
	stop()
	dls, err := tr.PeekDeadLetters(ctx, queue, 0)
	if err != nil || len(dls) != 1 || dls[0].EventID != pub[1].EventID {
		t.Fatalf("dead letters %v (%v), want %s", dls, err, pub[1].EventID)
	}
	redrive := &transport.PublishParams{Queue: queue, Messages: []transport.Message{dls[0].Message}, Redrive: true, Direct: true}
	if err := tr.Publish(ctx, redrive); err != nil {
		t.Fatalf("redrive to the adopted consumer: %v", err)
	}
	if _, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "tap", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, redrive); err == nil || !strings.Contains(err.Error(), "tap") {
		t.Errorf("redrive with another reader of the subject: %v, want a refusal naming tap", err)
	}
}

// TestAdoptedGiveBackOnlyWhenAlone: two redeliveries pulled together, the
// first runs alone and the second is given back — as a copy on its
// subject only when that subject reaches Lily's consumer alone. With
// another consumer of the subject ("tap") no copy is made: the redelivery
// stays received and is handed out next. Either way each message is
// acknowledged once and nothing stays in flight.
func TestAdoptedGiveBackOnlyWhenAlone(t *testing.T) {
	t.Parallel()
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			id := fmt.Sprintf("%08x", rand.Uint32())
			stream, queue := "GIVEBACK_"+id, "giveback"+id+".orders"
			tr := open(t, func(o *nats.Options) { o.Queues = map[string]nats.Binding{queue: {Stream: stream, Consumer: "svc"}} })
			consumers := []jetstream.ConsumerConfig{{Durable: "svc", AckPolicy: jetstream.AckExplicitPolicy}}
			if shared {
				consumers = append(consumers, jetstream.ConsumerConfig{Durable: "tap", AckPolicy: jetstream.AckExplicitPolicy})
			}
			s := adoptStream(t, tr.JetStream(), stream, queue, consumers...)
			qc := lily.QueueConfig{Name: queue, Transport: "nats"}.WithDefaults()
			if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tr.DeleteQueue(context.Background(), qc.Spec()) })
			pub := []lily.Message{{Body: []byte("one")}, {Body: []byte("two")}}
			if err := lily.Publish(ctx, tr, queue, pub); err != nil {
				t.Fatal(err)
			}
			recv := func(max int) []*transport.Delivery {
				t.Helper()
				ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: queue, Max: max, Wait: time.Second, Consumer: "c1", IsolateRedeliveries: true})
				if err != nil {
					t.Fatal(err)
				}
				return ds
			}
			settle := func(a transport.Action, ds ...*transport.Delivery) {
				t.Helper()
				var ss []transport.Settlement
				for _, d := range ds {
					ss = append(ss, transport.Settlement{Delivery: d, Action: a})
				}
				if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
					t.Fatal(err)
				}
			}
			// A new consumer instance pulls one at a time; then a batch.
			first := append(recv(2), recv(2)...)
			if len(first) != 2 {
				t.Fatalf("first deliveries: %d, want 2", len(first))
			}
			settle(transport.Release, first...) // both come back, counted twice
			alone := recv(2)
			if len(alone) != 1 || alone[0].DeliveryCount != 2 {
				t.Fatalf("a batch of two redeliveries handed out %d, want the first alone", len(alone))
			}
			info, err := s.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			wantMsgs := uint64(3) // the two, and the give-back copy of the second
			if shared {
				wantMsgs = 2 // no copy: tap would get it as a new message
			}
			if info.State.Msgs != wantMsgs {
				t.Errorf("stream holds %d messages, want %d", info.State.Msgs, wantMsgs)
			}
			settle(transport.Ack, alone...)
			next := recv(2)
			if len(next) != 1 || next[0].EventID == alone[0].EventID || next[0].DeliveryCount != 2 {
				t.Fatalf("after the one alone: %d deliveries (%v), want the other message, counted twice", len(next), next)
			}
			settle(transport.Ack, next...)
			// The server applies an acknowledgement after reading it: wait for it.
			transporttest.WaitForState(t, "nothing in flight", func() (bool, string) {
				n, err := tr.InFlight(ctx, queue)
				return err == nil && n == 0, fmt.Sprintf("in flight %d (%v)", n, err)
			})
			got := []string{alone[0].EventID, next[0].EventID}
			if !(got[0] == pub[0].EventID && got[1] == pub[1].EventID) && !(got[0] == pub[1].EventID && got[1] == pub[0].EventID) {
				t.Errorf("acknowledged %v, want each of %s, %s once", got, pub[0].EventID, pub[1].EventID)
			}
		})
	}
}

// adoptStream creates a stream on subject with consumers, as an
// application that is not Lily would, deleted when the test ends.
func adoptStream(t *testing.T, js jetstream.JetStream, stream, subject string, consumers ...jetstream.ConsumerConfig) jetstream.Stream {
	t.Helper()
	ctx := context.Background()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), stream) })
	for _, c := range consumers {
		if _, err := js.CreateConsumer(ctx, stream, c); err != nil {
			t.Fatal(err)
		}
	}
	return s
}
