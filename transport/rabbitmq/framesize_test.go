package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// sizedPublishing is a message whose header frame takes exactly size
// bytes (by rabbitmq.HeaderFrameSize), padded with the header "blob".
func sizedPublishing(t *testing.T, id string, size int) amqp.Publishing {
	t.Helper()
	p := amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, Timestamp: time.Now().UTC().Truncate(time.Second),
		Headers: amqp.Table{"tenant": "acme", "blob": ""}, Body: []byte(id)}
	pad := size - rabbitmq.HeaderFrameSize(&p)
	if pad < 0 {
		t.Fatalf("size %d is below the smallest frame %d", size, rabbitmq.HeaderFrameSize(&p))
	}
	p.Headers["blob"] = strings.Repeat("b", pad)
	if got := rabbitmq.HeaderFrameSize(&p); got != size {
		t.Fatalf("padded frame is %d bytes, want %d", got, size)
	}
	return p
}

// TestHeaderFrameSizeMatchesTheBroker checks the measurement against the
// broker and client, on a plain classic queue (a quorum queue adds
// x-delivery-count even to a first basic.get, which is why Lily's copies
// keep headroom): a message whose header frame is exactly frame_max is
// confirmed and read back; one byte more and the connection breaks on the
// way (RabbitMQ 3.10 confirms up to 8 bytes over and amqp091 then refuses
// to read the delivery, closing its connection; further over, the broker
// closes the publisher's connection) — which is why Lily measures before
// publishing.
func TestHeaderFrameSizeMatchesTheBroker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, ch := rawChannel(t)
	frameMax := conn.Config.FrameSize
	if frameMax <= 0 {
		t.Fatalf("no frame_max negotiated (%d)", frameMax)
	}
	q := randomName("frame.measure")
	if _, err := ch.QueueDeclare(q, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, c := rawChannel(t)
		c.QueueDelete(q, false, false, false)
	})
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	publish := func(id string, size int) (bool, error) {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false, sizedPublishing(t, id, size))
		if err != nil {
			return false, err
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return dc.WaitContext(wctx)
	}
	if ok, err := publish("exact", frameMax); err != nil || !ok {
		t.Fatalf("a header frame of exactly frame_max (%d) was not confirmed: %t %v", frameMax, ok, err)
	}
	_, reader := rawChannel(t)
	d, ok, err := reader.Get(q, true)
	if err != nil || !ok || d.MessageId != "exact" {
		t.Fatalf("the exact-size message did not read back: %t %v", ok, err)
	}
	over, err := publish("over", frameMax+1)
	confirmed := over && err == nil
	if confirmed {
		_, reader := rawChannel(t)
		if _, _, err := reader.Get(q, false); err == nil {
			t.Fatal("a header frame of frame_max+1 was published and read back: the measurement is off")
		} else {
			t.Logf("one byte over frame_max: confirmed, but the client cannot read it: %v", err)
		}
	} else {
		t.Logf("one byte over frame_max: not confirmed: %t %v", over, err)
	}
	// Conservation: the exact one was read and acknowledged; the one over
	// the limit is still in the queue if the broker confirmed it.
	_, c := rawChannel(t)
	st, err := c.QueueDeclarePassive(q, false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[bool]int{true: 1, false: 0}[confirmed]; st.Messages != want {
		t.Errorf("scratch queue holds %d messages, want %d", st.Messages, want)
	}
}

// TestOversizedHeadersCutEvidenceNotConnection: a foreign message whose
// headers leave little room under frame_max fails (a panic, so evidence
// with a stack) and is dead-lettered: Lily cuts its own evidence to fit —
// the stack first — instead of sending a frame the broker answers by
// closing the connection. The original headers are intact, the handler ran
// once, the log says what was cut.
func TestOversizedHeadersCutEvidenceNotConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs transporttest.SyncBuffer
	tr := openWith(t, rabbitmq.Options{Logger: slogTo(&logs)})
	defer tr.Close()
	qc := randomQueue("frame.cut", lily.QueueConfig{})
	declared(t, tr, qc)
	conn, ch := rawChannel(t)
	orig := sizedPublishing(t, "big-1", conn.Config.FrameSize-1200)
	if err := ch.PublishWithContext(ctx, "", qc.Name, true, false, orig); err != nil {
		t.Fatal(err)
	}
	out := newOutcomes()
	var calls atomic.Int64
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		calls.Add(1)
		panic("handler bug with a deep stack")
	}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 20 * time.Millisecond, Hooks: []lily.Hook{out.hook()}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	transporttest.RunUntil(t, c, 30*time.Second, func() bool {
		n, err := tr.DeadLetterDepth(ctx, qc.Name)
		return err == nil && n > 0
	})
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1 (a closed connection redelivers)", n)
	}
	d, ok, err := ch.Get(rabbitmq.DeadLetterQueue(qc.Name), false)
	if err != nil || !ok {
		t.Fatalf("no dead letter (%v)", err)
	}
	if d.Headers["blob"] != orig.Headers["blob"] || d.Headers["tenant"] != "acme" {
		t.Error("the original headers were changed to make room")
	}
	if _, has := d.Headers[evidence.HeaderErrorStack]; has {
		t.Error("the stack is still there: nothing was cut")
	}
	if cut, _ := d.Headers[rabbitmq.HeaderEvidenceTruncated].(string); !strings.Contains(cut, evidence.HeaderErrorStack) {
		t.Errorf("%s = %q, want it to name the stack", rabbitmq.HeaderEvidenceTruncated, cut)
	}
	if d.Headers[evidence.HeaderReason] != string(evidence.ReasonRetriesExhausted) || d.Headers[evidence.HeaderErrorType] == nil {
		t.Errorf("Lily's evidence lost: reason %#v error type %#v", d.Headers[evidence.HeaderReason], d.Headers[evidence.HeaderErrorType])
	}
	if err := d.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "evidence cut down") || !strings.Contains(logs.String(), "x-lily-error-stack") {
		t.Errorf("the log does not say what was cut:\n%s", logs.String())
	}
	transporttest.WaitFor(t, "the dead letter back in its DLQ", func() bool {
		n, err := tr.DeadLetterDepth(ctx, qc.Name)
		return err == nil && n == 1
	})
	conserveForeign(t, tr, nil, qc.Name, []string{"big-1"}, out.acked)
}

// TestHeadersWithNoRoomFailOneHandOff: when the original's headers leave
// no room even for the essential evidence, that one hand-off fails with
// ErrFrameTooLarge, nothing is sent, and the connection stays up: the
// same delivery can still be settled on it, as can its neighbours.
func TestHeadersWithNoRoomFailOneHandOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := randomQueue("frame.noroom", lily.QueueConfig{})
	tr := openDeclared(t, qc)
	conn, ch := rawChannel(t)
	ids := []string{"full-1", "small-1"}
	if err := ch.PublishWithContext(ctx, "", qc.Name, true, false, sizedPublishing(t, ids[0], conn.Config.FrameSize-20)); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(ctx, "", qc.Name, true, false, amqp.Publishing{MessageId: ids[1], Body: []byte("small")}); err != nil {
		t.Fatal(err)
	}
	var ds []*transport.Delivery
	for len(ds) < 2 {
		got, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 2, Wait: time.Second, Consumer: "noroom"})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
	}
	var ss []transport.Settlement
	for _, d := range ds {
		h := transport.CloneHeaders(d.Headers)
		if h == nil {
			h = transport.Headers{}
		}
		h[evidence.HeaderReason] = string(evidence.ReasonPermanent)
		h[evidence.HeaderSource] = "rabbitmq/" + qc.Name
		ss = append(ss, transport.Settlement{Delivery: d, Action: transport.DeadLetter, Reason: string(evidence.ReasonPermanent), Headers: h})
	}
	errs := transport.SettleErrors(tr.Settle(ctx, &transport.SettleParams{Settlements: ss}), len(ss))
	acked := map[string]int{}
	for i, d := range ds {
		switch {
		case d.EventID == ids[0] && !errors.Is(errs[i], rabbitmq.ErrFrameTooLarge):
			t.Errorf("hand-off of the full message: %v, want ErrFrameTooLarge", errs[i])
		case d.EventID == ids[1] && errs[i] != nil:
			t.Errorf("hand-off of its neighbour: %v, want it dead-lettered", errs[i])
		}
	}
	if errs[0] != nil && errs[1] != nil {
		t.Fatal("nothing settled")
	}
	// The connection and channel are up: the refused one is acked on them.
	for _, d := range ds {
		if d.EventID == ids[0] {
			if err := tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: d, Action: transport.Ack}}}); err != nil {
				t.Fatalf("ack after the refused hand-off: %v (was the connection closed?)", err)
			}
			acked[d.EventID]++
		}
	}
	// Publishing such a message through Lily fails it alone, unsent, and
	// the connection stays up too.
	big := sizedPublishing(t, "big-publish", conn.Config.FrameSize)
	err := tr.Publish(ctx, &transport.PublishParams{Queue: qc.Name, Messages: []transport.Message{
		{EventID: "big-publish", Body: big.Body, Headers: transport.Headers{"blob": big.Headers["blob"]}}}})
	if !errors.Is(err, rabbitmq.ErrFrameTooLarge) {
		t.Errorf("publishing headers over frame_max: %v, want ErrFrameTooLarge", err)
	}
	if n, err := tr.DeadLetterDepth(ctx, qc.Name); err != nil || n != 1 {
		t.Errorf("dead-letter queue holds %d (%v), want the neighbour only", n, err)
	}
	conserveForeign(t, tr, nil, qc.Name, ids, acked)
}
