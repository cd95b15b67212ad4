package lilylambda_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/lilylambda"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqs"
	"github.com/lily-mq/lily/transport/sqs/sqstest"
)

// fixture is a queue on the emulator and the function's handler calls.
type fixture struct {
	t     *testing.T
	tr    *sqs.Transport
	qc    lily.QueueConfig
	url   string
	mu    sync.Mutex
	calls map[string]int
}

func newFixture(t *testing.T, prefix string) *fixture {
	t.Helper()
	e, err := sqstest.Start()
	if err != nil {
		t.Fatal(err)
	}
	tr, err := sqs.Open(e.Options(2 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	qc := lily.QueueConfig{Name: fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()), Transport: "sqs", RetryAttempts: 1,
		RetryBackoffMillis: new(int64(500)), DeliveryLimit: new(2)}.WithDefaults()
	ctx := context.Background()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	url, err := tr.QueueURL(ctx, qc.Name)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, tr: tr, qc: qc, url: url, calls: map[string]int{}}
}

// handler fails "bad" permanently and "flaky" once; "ok" succeeds.
func (f *fixture) handler(ctx context.Context, d *lily.Delivery) error {
	f.mu.Lock()
	f.calls[string(d.Body)]++
	n := f.calls[string(d.Body)]
	f.mu.Unlock()
	switch {
	case string(d.Body) == "bad":
		return lily.Permanent(errors.New("order rejected: unknown SKU"))
	case string(d.Body) == "flaky" && n == 1:
		return errors.New("inventory service: 503")
	}
	return nil
}

// poll receives up to 10 messages as the Lambda poller does and returns
// them as an event batch.
func (f *fixture) poll(wait time.Duration) events.SQSEvent {
	f.t.Helper()
	out, err := f.tr.Client().ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(f.url), MaxNumberOfMessages: 10,
		WaitTimeSeconds: int32(wait / time.Second), MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil {
		f.t.Fatal(err)
	}
	var ev events.SQSEvent
	for _, m := range out.Messages {
		attrs := map[string]events.SQSMessageAttribute{}
		for k, a := range m.MessageAttributes {
			attrs[k] = events.SQSMessageAttribute{DataType: aws.ToString(a.DataType), StringValue: a.StringValue, BinaryValue: a.BinaryValue}
		}
		ev.Records = append(ev.Records, events.SQSMessage{MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle),
			Body: aws.ToString(m.Body), Attributes: m.Attributes, MessageAttributes: attrs, EventSource: "aws:sqs", AWSRegion: sqstest.Region,
			EventSourceARN: "arn:aws:sqs:" + sqstest.Region + ":" + sqstest.AccountID + ":" + sqs.QueueName(f.qc.Name)})
	}
	return ev
}

// finish does what Lambda does with the response: it deletes the
// records that succeeded and leaves the failures to come back.
func (f *fixture) finish(ev events.SQSEvent, resp events.SQSEventResponse) {
	f.t.Helper()
	failed := map[string]bool{}
	for _, r := range resp.BatchItemFailures {
		failed[r.ItemIdentifier] = true
	}
	for _, r := range ev.Records {
		if failed[r.MessageId] {
			f.tr.Client().ChangeMessageVisibility(context.Background(), &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(f.url), ReceiptHandle: aws.String(r.ReceiptHandle)})
			continue
		}
		// Lily deleted what it retried or dead-lettered already; Lambda's
		// delete of those finds nothing, as on SQS.
		f.tr.Client().DeleteMessage(context.Background(), &awssqs.DeleteMessageInput{QueueUrl: aws.String(f.url), ReceiptHandle: aws.String(r.ReceiptHandle)})
	}
}

// TestBatch: one batch with an acknowledged, a permanently failing, a
// transiently failing and a crash-type record (received twice before by
// invocations that died: receive count 3 > delivery_limit 2). The response
// has no batch item failure: the permanent one and the crash-type one are
// in "<queue>-dlq" with evidence (the crash-type one without a handler
// call), the transient one came back as a delayed copy with x-retry-count
// 1, which the next invocation acknowledges.
func TestBatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "lambda")
	ctx := context.Background()
	crash := []lily.Message{{Body: []byte("crash")}}
	if err := lily.Publish(ctx, f.tr, f.qc.Name, crash); err != nil {
		t.Fatal(err)
	}
	for range 2 { // two invocations that died holding it
		ev := f.poll(time.Second)
		if len(ev.Records) != 1 {
			t.Fatalf("%d records, want the crash-type one", len(ev.Records))
		}
		f.finish(ev, events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: ev.Records[0].MessageId}}})
	}
	msgs := []lily.Message{{Body: []byte("ok")}, {Body: []byte("bad"), Headers: lily.Headers{"tenant": "acme"}}, {Body: []byte("flaky")}}
	if err := lily.Publish(ctx, f.tr, f.qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	h, err := lilylambda.New(f.tr, lily.HandlerFunc(f.handler), lilylambda.Options{Queue: f.qc, Name: "orders-fn", Version: "7"})
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	for len(ev.Records) < 4 { // the emulator may hand them over in two polls
		more := f.poll(time.Second)
		ev.Records = append(ev.Records, more.Records...)
	}
	resp, err := h.Handle(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	f.finish(ev, resp)
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("batch item failures %v, want none", resp.BatchItemFailures)
	}
	if f.calls["crash"] != 0 || f.calls["ok"] != 1 || f.calls["bad"] != 1 || f.calls["flaky"] != 1 {
		t.Errorf("handler calls %v, want ok, bad, flaky once and crash never", f.calls)
	}
	// The retry copy, due after its delay.
	var retry events.SQSEvent
	waittest.ForState(t, "the flaky record's retry copy", func() (bool, string) {
		retry = f.poll(time.Second) // a receive that waits up to a second
		return len(retry.Records) > 0, fmt.Sprintf("%d records", len(retry.Records))
	})
	if len(retry.Records) != 1 || retry.Records[0].Body != "flaky" {
		t.Fatalf("after the batch: %d records %+v, want the flaky one's retry copy", len(retry.Records), retry.Records)
	}
	resp, err = h.Handle(ctx, retry)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("retry batch: %v %v", resp, err)
	}
	f.finish(retry, resp)
	if f.calls["flaky"] != 2 {
		t.Errorf("flaky handled %d times, want 2", f.calls["flaky"])
	}

	dls, err := f.tr.PeekDeadLetters(ctx, f.qc.Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]evidence.Reason{}
	for _, d := range dls {
		rec, err := evidence.Decode(d.Headers)
		if err != nil {
			t.Errorf("evidence of %s: %v", d.Body, err)
		}
		reasons[string(d.Body)] = rec.Reason
		if rec.Consumer != "orders-fn" || rec.ConsumerVersion != "7" || rec.Source != "sqs/"+f.qc.Name {
			t.Errorf("evidence of %s: consumer %s %s source %s", d.Body, rec.Consumer, rec.ConsumerVersion, rec.Source)
		}
		if string(d.Body) == "bad" && (d.Headers["tenant"] != "acme" || d.EventID != msgs[1].EventID || !strings.Contains(rec.ErrorMessage, "unknown SKU")) {
			t.Errorf("dead letter bad: event %s tenant %v error %q", d.EventID, d.Headers["tenant"], rec.ErrorMessage)
		}
		if string(d.Body) == "crash" && (rec.DeliveryCount != 3 || d.EventID != crash[0].EventID) {
			t.Errorf("dead letter crash: delivery count %d event %s, want 3 %s", rec.DeliveryCount, d.EventID, crash[0].EventID)
		}
	}
	if len(dls) != 2 || reasons["bad"] != evidence.ReasonPermanent || reasons["crash"] != evidence.ReasonDeliveryLimit {
		t.Errorf("dead letters %v, want bad permanent and crash delivery_limit", reasons)
	}
	if n := sqstest.Depth(f.qc.Name); n != 0 {
		t.Errorf("%d messages left in the queue, want 0", n)
	}
}

// TestBatchItemFailureWhenTheDLQRefuses: the DLQ is gone, so the dead
// letter cannot be handed off: that record is a batch item failure (SQS
// hands it out again, nothing is lost) and the acknowledged one is not.
func TestBatchItemFailureWhenTheDLQRefuses(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "lambda-nodlq")
	ctx := context.Background()
	durl, err := f.tr.QueueURL(ctx, sqs.DeadLetterQueue(f.qc.Name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.tr.Client().DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(durl)}); err != nil {
		t.Fatal(err)
	}
	// A fresh transport: it does not know the DLQ's URL.
	fresh, err := sqs.Open(func() sqs.Options { e, _ := sqstest.Start(); return e.Options(2 * time.Second) }())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	msgs := []lily.Message{{Body: []byte("ok")}, {Body: []byte("bad")}}
	if err := lily.Publish(ctx, fresh, f.qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	h, err := lilylambda.New(fresh, lily.HandlerFunc(f.handler), lilylambda.Options{Queue: f.qc})
	if err != nil {
		t.Fatal(err)
	}
	var ev events.SQSEvent
	for len(ev.Records) < 2 {
		ev.Records = append(ev.Records, f.poll(time.Second).Records...)
	}
	resp, err := h.Handle(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	var bad string
	for _, r := range ev.Records {
		if r.Body == "bad" {
			bad = r.MessageId
		}
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != bad {
		t.Errorf("batch item failures %v, want only the bad record %s", resp.BatchItemFailures, bad)
	}
	f.finish(ev, resp)
	if n := sqstest.Depth(f.qc.Name); n != 1 {
		t.Errorf("%d messages in the queue, want the bad one back", n)
	}
}
