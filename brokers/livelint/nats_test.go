package livelint

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/nats/natstest"
)

// TestCheckNATS reads a real server: a foreign consumer with MaxDeliver
// -1 and no advisory stream, a missing one, and a nats queue whose consumer has a MaxDeliver and whose
// dead-letter stream was recreated with work-queue retention; each is
// reported with its code, and healthy foreign consumers with nothing; a
// BackOff longer than MaxDeliver (which 2.9 refuses) is judged as read.
func TestCheckNATS(t *testing.T) {
	url := natstest.URL(t)
	ctx := context.Background()
	tr, err := nats.Open(nats.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	js := tr.JetStream()
	id := fmt.Sprintf("%08x", rand.Uint32())
	stream := "LINT_" + id
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"lint" + id + ".>"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), stream) })
	for _, c := range []jetstream.ConsumerConfig{
		{Durable: "forever", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "lint" + id + ".a"},
		{Durable: "backoff", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "lint" + id + ".b", MaxDeliver: 4,
			BackOff: []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{Durable: "healthy", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "lint" + id + ".c", MaxDeliver: 5},
	} {
		if _, err := js.CreateConsumer(ctx, stream, c); err != nil {
			t.Fatal(err)
		}
	}
	healthy := tr.Foreign(stream, "healthy", "")
	if err := healthy.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), nats.AdvisoryStream(stream, "healthy")) })
	if err := tr.Foreign(stream, "backoff", "").Declare(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.DeleteStream(context.Background(), nats.AdvisoryStream(stream, "backoff")) })

	q := lily.QueueConfig{Name: "lintq" + id + ".orders", Transport: "nats"}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.DeleteQueue(context.Background(), q.Spec()) })
	b := tr.QueueBinding(q.Name)
	if _, err := js.UpdateConsumer(ctx, b.Stream, jetstream.ConsumerConfig{Durable: b.Consumer, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: nats.DefaultAckWait, MaxDeliver: 5, MaxAckPending: nats.DefaultMaxAckPending}); err != nil {
		t.Fatal(err)
	}
	dlq, err := js.Stream(ctx, nats.DeadLetterStream(q.Name))
	if err != nil {
		t.Fatal(err)
	}
	dcfg := dlq.CachedInfo().Config
	if err := js.DeleteStream(ctx, dcfg.Name); err != nil {
		t.Fatal(err)
	}
	dcfg.Retention = jetstream.WorkQueuePolicy
	if _, err := js.CreateStream(ctx, dcfg); err != nil {
		t.Fatal(err)
	}

	cfg := config.Config{NATSURL: url, Queues: []lily.QueueConfig{q}, ForeignDLQs: []config.ForeignDLQConfig{
		{Queue: "f.forever", Kind: config.ForeignJetStream, Stream: stream, Consumer: "forever"},
		{Queue: "f.backoff", Kind: config.ForeignJetStream, Stream: stream, Consumer: "backoff"},
		{Queue: "f.healthy", Kind: config.ForeignJetStream, Stream: stream, Consumer: "healthy"},
		{Queue: "f.missing", Kind: config.ForeignJetStream, Stream: stream, Consumer: "missing"},
	}}
	states, err := ReadNATS(ctx, cfg, tr)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range CheckNATS(states) {
		got = append(got, f.Queue+" "+f.Code)
	}
	sort.Strings(got)
	want := []string{
		"f.forever " + lint.CodeNATSAdvisoryStreamMissing,
		"f.forever " + lint.CodeNATSMaxDeliverUnlimited,
		"f.missing " + lint.CodeNATSConsumerMissing,
		q.Name + " " + lint.CodeNATSDLQWorkQueue,
		q.Name + " " + lint.CodeNATSMaxDeliverCountsRetries,
	}
	sort.Strings(want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("findings\n%v\nwant\n%v", got, want)
	}
	// A 2.9 server refuses a BackOff with as many steps as MaxDeliver; a
	// consumer from another server version may have one.
	st := NATSConsumerState{Queue: "f.old", Foreign: true, Stream: stream, Consumer: "old", Exists: true, AdvisoryStream: true,
		Config: jetstream.ConsumerConfig{MaxDeliver: 2, BackOff: []time.Duration{time.Second, time.Second, time.Second}}}
	if fs := CheckNATS([]NATSConsumerState{st}); len(fs) != 1 || fs[0].Code != lint.CodeNATSBackOffBeyondMaxDeliver {
		t.Errorf("BackOff of 3 steps with MaxDeliver 2: %v", fs)
	}
}
