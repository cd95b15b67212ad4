package sqs_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqs"
	"github.com/lily-mq/lily/transport/sqs/sqstest"
	"github.com/lily-mq/lily/transport/transporttest"
)

// The crash test re-executes this test binary as consumer processes that
// die on a poison message; the emulator (the broker) lives in the parent.
const (
	childEndpoint = "LILY_SQS_CRASH_ENDPOINT"
	childQueue    = "LILY_SQS_CRASH_QUEUE"
	childLog      = "LILY_SQS_CRASH_LOG"
	childPause    = "LILY_SQS_CRASH_PAUSE" // a duration: each handler call takes this long
	crashLimit    = 3
)

func crashQueue(name string) lily.QueueConfig {
	return lily.QueueConfig{Name: name, Transport: "sqs", DeliveryLimit: new(crashLimit)}.WithDefaults()
}

// crashChild runs the crash-test consumer when the environment asks for
// it (and reports whether it did).
func crashChild() bool {
	endpoint := os.Getenv(childEndpoint)
	if endpoint == "" {
		return false
	}
	os.Exit(crashConsumer(endpoint, os.Getenv(childQueue), os.Getenv(childLog)))
	return true
}

// crashConsumer consumes the queue until nothing is in flight, logging each
// message it acknowledges; the body "poison" kills the process mid-handler.
func crashConsumer(endpoint, queue, logPath string) int {
	o := (&sqstest.Emulator{}).Options(time.Second)
	o.Endpoint = endpoint
	tr, err := sqs.Open(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer tr.Close()
	pause, _ := time.ParseDuration(os.Getenv(childPause))
	return transporttest.CrashConsumer(tr, crashQueue(queue), logPath, pause)
}

// TestCrashPoisonByReceiveCount: a message that kills its consumer process
// comes back after its visibility timeout with ApproximateReceiveCount
// raised — counted by the broker, outside the dying process — and is
// dead-lettered with reason delivery_limit, without calling the handler,
// after exactly delivery_limit crashes. Its 19 neighbours, received in the
// same batches and redelivered with it, are all acknowledged (the
// consumer turns cautious after a redelivery), none dead-lettered.
func TestCrashPoisonByReceiveCount(t *testing.T) {
	t.Parallel()
	e := emulator(t)
	tr := open(t)
	ctx := context.Background()
	queue := fmt.Sprintf("crash-%d", time.Now().UnixNano())
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{crashQueue(queue).Spec()}}); err != nil {
		t.Fatal(err)
	}
	msgs := make([]lily.Message, 20)
	for i := range msgs {
		msgs[i] = lily.Message{Body: []byte(fmt.Sprintf("ok-%d", i))}
	}
	msgs[3].Body = []byte("poison")
	if err := lily.Publish(ctx, tr, queue, msgs); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "acked.log")
	restarts := transporttest.RunCrashChildren(t, childEndpoint+"="+e.URL(), childQueue+"="+queue, childLog+"="+logPath)
	if restarts != crashLimit {
		t.Errorf("consumer died %d times, want delivery_limit = %d", restarts, crashLimit)
	}
	dls, err := tr.PeekDeadLetters(ctx, queue, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].EventID != msgs[3].EventID {
		t.Fatalf("dead letters %v, want only the poison %s", ids(dls), msgs[3].EventID)
	}
	rec, err := evidence.Decode(dls[0].Headers)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Reason != evidence.ReasonDeliveryLimit || rec.DeliveryCount != crashLimit+1 {
		t.Errorf("poison dead-lettered with reason %s at delivery count %d, want delivery_limit at %d", rec.Reason, rec.DeliveryCount, crashLimit+1)
	}
	transporttest.WantProcessedAllBut(t, logPath, msgs, 3)
	if n := sqstest.Depth(queue); n != 0 {
		t.Errorf("%d messages left in the queue, want 0", n)
	}
}

// TestCrashPoisonCompetingConsumers is TestCrashPoisonByReceiveCount with
// three consumer processes on the queue at once, each restarted when it
// dies: a death leaves the dead consumer's received messages to come back
// after their visibility timeout with their receive counts raised, to
// whichever consumer receives next, mid-stream, several in one batch. The
// redeliveries received beside one that runs alone are given back as
// copies carrying their count (giveBack): kept leased instead, they died
// with the poison and reached delivery_limit beside it (three innocent
// messages dead-lettered in a CI run). The consumers die exactly
// delivery_limit times in all, the poison alone is dead-lettered, and
// every other message is processed once.
func TestCrashPoisonCompetingConsumers(t *testing.T) {
	t.Parallel()
	e := emulator(t)
	tr := open(t)
	ctx := context.Background()
	queue := fmt.Sprintf("crash-fleet-%d", time.Now().UnixNano())
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{crashQueue(queue).Spec()}}); err != nil {
		t.Fatal(err)
	}
	msgs := make([]lily.Message, 60)
	for i := range msgs {
		msgs[i] = lily.Message{Body: []byte(fmt.Sprintf("ok-%d", i))}
	}
	const poison = 21
	msgs[poison].Body = []byte("poison")
	// Every third message comes from a foreign producer (no Lily pack, a
	// Number attribute): its event ID is its SQS message ID, which a
	// give-back copy must keep (it gets a new message ID of its own).
	var lilys []lily.Message
	url, err := tr.QueueURL(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	for i := range msgs {
		if i%3 != 0 {
			lilys = append(lilys, msgs[i])
			continue
		}
		out, err := tr.Client().SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(string(msgs[i].Body)),
			MessageAttributes: map[string]types.MessageAttributeValue{"amount": {DataType: aws.String("Number.decimal"), StringValue: aws.String("12.50")}}})
		if err != nil {
			t.Fatal(err)
		}
		msgs[i].EventID = aws.ToString(out.MessageId)
	}
	if err := lily.Publish(ctx, tr, queue, lilys); err != nil {
		t.Fatal(err)
	}
	for i, j := 0, 0; i < len(msgs); i++ {
		if i%3 != 0 {
			msgs[i].EventID = lilys[j].EventID
			j++
		}
	}
	logPath := filepath.Join(t.TempDir(), "acked.log")
	restarts := transporttest.RunCrashFleet(t, 3, childEndpoint+"="+e.URL(), childQueue+"="+queue, childLog+"="+logPath, childPause+"=10ms")
	if restarts != crashLimit {
		t.Errorf("the consumers died %d times in all, want delivery_limit = %d", restarts, crashLimit)
	}
	dls, err := tr.PeekDeadLetters(ctx, queue, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].EventID != msgs[poison].EventID {
		t.Fatalf("dead letters %v, want only the poison %s", ids(dls), msgs[poison].EventID)
	}
	transporttest.WantProcessedAllBut(t, logPath, msgs, poison)
	if n := sqstest.Depth(queue); n != 0 {
		t.Errorf("%d messages left in the queue, want 0", n)
	}
}

// TestRedrivePolicyBackstop: a consumer that receives and never settles
// (it dies before it can dead-letter) is caught by the queue's redrive
// policy, which Declare sets to maxReceiveCount = delivery_limit + 1 on
// "<queue>-dlq"; DrainDeadLetters then hands the broker-moved message over
// with the evidence SQS gives: reason delivery_limit, its event ID, body
// and attributes untouched.
func TestRedrivePolicyBackstop(t *testing.T) {
	t.Parallel()
	tr := open(t)
	ctx := context.Background()
	queue := fmt.Sprintf("backstop-%d", time.Now().UnixNano())
	qc := lily.QueueConfig{Name: queue, Transport: "sqs", DeliveryLimit: new(1)}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	attrs, err := tr.Attributes(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(attrs["RedrivePolicy"], `"maxReceiveCount": "2"`) && !strings.Contains(attrs["RedrivePolicy"], `"maxReceiveCount":2`) {
		t.Errorf("redrive policy %q, want maxReceiveCount 2 (delivery_limit 1 + 1)", attrs["RedrivePolicy"])
	}
	pub := []lily.Message{{Body: []byte(`{"order":1}`), Headers: transport.Headers{"tenant": "acme"}}}
	if err := lily.Publish(ctx, tr, queue, pub); err != nil {
		t.Fatal(err)
	}
	msg := pub[0]
	id := ""
	transporttest.WaitWithin(t, time.Minute, "the broker to move the unsettled message to the DLQ", func() (bool, string) {
		if n := sqstest.Depth(sqs.DeadLetterQueue(queue)); n > 0 {
			return true, fmt.Sprintf("DLQ depth %d", n)
		}
		ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: queue, Max: 1, Wait: time.Second, Consumer: "never-settles"})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			id = d.EventID
		}
		// The consumer dies: its receipts become visible again.
		if _, err := tr.RecoverLeases(ctx, &transport.RecoverParams{Consumer: "never-settles"}); err != nil {
			t.Fatal(err)
		}
		return false, fmt.Sprintf("DLQ empty, last received event %q", id)
	})
	if id != msg.EventID {
		t.Fatalf("received event %q, want %s", id, msg.EventID)
	}
	var got []*transport.Delivery
	n, err := tr.DrainDeadLetters(ctx, &transport.DrainParams{Queue: queue}, func(_ context.Context, ds []*transport.Delivery) error {
		got = append(got, ds...)
		return nil
	})
	if err != nil || n != 1 || len(got) != 1 {
		t.Fatalf("drained %d (%v), want 1", n, err)
	}
	d := got[0]
	rec, _ := evidence.Decode(d.Headers)
	if d.EventID != msg.EventID || string(d.Body) != `{"order":1}` || d.Headers["tenant"] != "acme" {
		t.Errorf("drained %s %q tenant=%v, want %s with body and attributes untouched", d.EventID, d.Body, d.Headers["tenant"], msg.EventID)
	}
	if rec.Reason != evidence.ReasonDeliveryLimit || rec.Source != "sqs/"+queue || d.DeliveryCount < 2 {
		t.Errorf("evidence reason %s source %s count %d, want delivery_limit, sqs/%s, >= 2", rec.Reason, rec.Source, d.DeliveryCount, queue)
	}
	if n := sqstest.Depth(sqs.DeadLetterQueue(queue)) + sqstest.Depth(queue); n != 0 {
		t.Errorf("%d messages left after the drain, want 0", n)
	}
}

func ids(ds []*transport.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.EventID
	}
	return out
}
