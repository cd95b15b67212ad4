package nats_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily/plan"
)

// TestPlanKnowsTheServersNumbers checks the JetStream numbers 'lily plan
// jetstream' uses against the server: its defaults (AckWait, MaxAckPending,
// max_payload), a BackOff replacing AckWait and refused with a MaxDeliver
// below its length (the plan also refuses one equal to it, as servers up
// to 2.10.2x do), and the bytes a stored message with headers counts
// toward MaxBytes.
func TestPlanKnowsTheServersNumbers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := open(t)
	js := tr.JetStream()
	if got := tr.Conn().MaxPayload(); got != plan.JetStreamDefaultMaxPayload {
		t.Errorf("server max_payload %d, plan's default %d (a server configured otherwise: adjust the test's server)", got, plan.JetStreamDefaultMaxPayload)
	}
	name := fmt.Sprintf("PLAN_%08x", rand.Uint32())
	subject := "plan." + name
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), name) })

	c, err := js.CreateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "defaults", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	if cfg := c.CachedInfo().Config; cfg.AckWait != plan.JetStreamDefaultAckWait || cfg.MaxAckPending != plan.JetStreamDefaultMaxAckPending {
		t.Errorf("server defaults AckWait %s, MaxAckPending %d; plan's %s, %d", cfg.AckWait, cfg.MaxAckPending, plan.JetStreamDefaultAckWait, plan.JetStreamDefaultMaxAckPending)
	}
	backOff := []time.Duration{time.Second, 5 * time.Second, 30 * time.Second}
	// Every server refuses fewer deliveries than BackOff entries; up to
	// 2.10.2x a server refuses as many, later ones accept it. The plan
	// refuses both, so that what it accepts every supported server does.
	_, err = js.CreateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "refused", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 2, BackOff: backOff})
	if r, _ := plan.JetStream(plan.JetStreamParams{MaxDeliver: 2, BackOff: backOff}); !r.BackOffRefused || err == nil || !strings.Contains(err.Error(), "backoff") {
		t.Errorf("MaxDeliver 2 with 3 BackOff entries: server %v, plan refused %v; want both to refuse", err, r.BackOffRefused)
	}
	if r, _ := plan.JetStream(plan.JetStreamParams{MaxDeliver: 3, BackOff: backOff}); !r.BackOffRefused {
		t.Errorf("MaxDeliver 3 with 3 BackOff entries: plan accepts what servers before 2.10.2x refuse")
	}
	c, err = js.CreateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "backoff", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 5, AckWait: time.Minute, BackOff: backOff})
	if err != nil {
		t.Fatal(err)
	}
	r, err := plan.JetStream(plan.JetStreamParams{MaxDeliver: 5, AckWait: time.Minute, BackOff: backOff})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.AckWait; got.Seconds() != r.LeaseS {
		t.Errorf("server AckWait with BackOff %s, plan's lease %v s", got, r.LeaseS)
	}

	m := natsgo.NewMsg(subject)
	m.Header.Set("x-lily-reason", "permanent")
	m.Data = []byte("a dead letter's body")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hdr := len("NATS/1.0\r\nx-lily-reason: permanent\r\n\r\n")
	r, err = plan.JetStream(plan.JetStreamParams{MessageBytes: int64(hdr + len(m.Data)), DLQSubject: subject})
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 || info.State.Bytes != uint64(r.DLQStoredBytes) {
		t.Errorf("stream holds %d message(s) of %d bytes; plan says %d bytes", info.State.Msgs, info.State.Bytes, r.DLQStoredBytes)
	}
}
