package sqs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
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

func strAttr(dt, v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String(dt), StringValue: aws.String(v)}
}

// declare declares a fresh queue configured by qc on tr and returns qc.
func declare(t *testing.T, tr *sqs.Transport, prefix string, qc lily.QueueConfig) lily.QueueConfig {
	t.Helper()
	qc.Name = fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
	qc.Transport = "sqs"
	qc = qc.WithDefaults()
	if err := tr.Declare(context.Background(), &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	return qc
}

// consumeUntil runs a consumer until done holds.
func consumeUntil(t *testing.T, tr transport.Transport, qc lily.QueueConfig, h lily.Handler, done func() bool) {
	t.Helper()
	c, err := lily.NewConsumer(tr, h, lily.ConsumerOptions{Queue: qc, Concurrency: 2, ReceiveWait: time.Second, Name: "sqs-test", Version: "v1",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		transporttest.Poll(ctx, func() (bool, string) { return done(), "" })
		cancel()
	}()
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if !done() {
		t.Fatal("gave up waiting for the consumer")
	}
}

// TestForeignProducerEvidencePacking: messages sent by a raw SQS client
// (no event ID, Number and Binary attributes, a forged x-retry-count
// string, one with all 10 attribute slots taken) are dead-lettered by Lily
// with evidence. The DLQ copy carries at most 10 attributes on the wire:
// the producer's own as they were plus one x-lily, or — when the producer
// used all 10 — x-lily alone, carrying them. Lily reads back every
// producer attribute unchanged, the SQS MessageId as event ID, and the
// complete evidence.
func TestForeignProducerEvidencePacking(t *testing.T) {
	t.Parallel()
	tr := open(t)
	ctx := context.Background()
	qc := declare(t, tr, "foreign", lily.QueueConfig{})
	url, err := tr.QueueURL(ctx, qc.Name)
	if err != nil {
		t.Fatal(err)
	}
	few := map[string]types.MessageAttributeValue{
		"tenant": strAttr("String", "acme"), "amount": strAttr("Number", "12.50"),
		"sig": {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 0xff}},
	}
	full := map[string]types.MessageAttributeValue{}
	for i := range sqs.MaxAttributes {
		full[fmt.Sprintf("a%d", i)] = strAttr("String", fmt.Sprintf("v%d", i))
	}
	forged := map[string]types.MessageAttributeValue{"x-retry-count": strAttr("String", "0")}
	sent := map[string]map[string]types.MessageAttributeValue{}
	bodies := map[string]string{}
	for name, attrs := range map[string]map[string]types.MessageAttributeValue{"few": few, "full": full, "forged": forged} {
		out, err := tr.Client().SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(`{"kind":"` + name + `"}`), MessageAttributes: attrs})
		if err != nil {
			t.Fatalf("raw send %s: %v", name, err)
		}
		sent[aws.ToString(out.MessageId)] = attrs
		bodies[aws.ToString(out.MessageId)] = `{"kind":"` + name + `"}`
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	consumeUntil(t, tr, qc, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		mu.Lock()
		seen[d.EventID] = true
		mu.Unlock()
		return lily.Permanent(errors.New("unsupported order kind"))
	}), func() bool { return sqstest.Depth(qc.Name) == 0 && sqstest.Depth(sqs.DeadLetterQueue(qc.Name)) == 3 })

	// On the wire: at most 10 attributes; the producer's kept as sent.
	durl, err := tr.QueueURL(ctx, sqs.DeadLetterQueue(qc.Name))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := tr.Client().ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(durl), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range raw.Messages {
		if n := len(m.MessageAttributes); n > sqs.MaxAttributes {
			t.Errorf("DLQ copy with %d attributes: SQS allows %d", n, sqs.MaxAttributes)
		}
		if _, ok := m.MessageAttributes[sqs.PackAttribute]; !ok {
			t.Errorf("DLQ copy without the %s attribute", sqs.PackAttribute)
		}
		if strings.Contains(aws.ToString(m.Body), "few") {
			for k, a := range few {
				got := m.MessageAttributes[k]
				if aws.ToString(got.DataType) != aws.ToString(a.DataType) || aws.ToString(got.StringValue) != aws.ToString(a.StringValue) || string(got.BinaryValue) != string(a.BinaryValue) {
					t.Errorf("producer attribute %s on the DLQ copy: %s %q %x, want %s %q %x as sent", k,
						aws.ToString(got.DataType), aws.ToString(got.StringValue), got.BinaryValue, aws.ToString(a.DataType), aws.ToString(a.StringValue), a.BinaryValue)
				}
			}
		}
		tr.Client().ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(durl), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
	}
	if len(raw.Messages) != 3 {
		t.Fatalf("%d raw DLQ messages, want 3", len(raw.Messages))
	}

	// Through Lily: identity, attributes and evidence.
	dls, err := tr.PeekDeadLetters(ctx, qc.Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 3 {
		t.Fatalf("%d dead letters, want 3", len(dls))
	}
	for _, d := range dls {
		attrs, ok := sent[d.EventID]
		_, forged := attrs["x-retry-count"]
		if !ok || seen[d.EventID] == forged { // a forged count is dead-lettered before the handler
			t.Errorf("dead letter %s (%q, %v): not the SQS MessageId of a sent message (handled: %v; sent %v)", d.EventID, d.Body, d.Headers, seen[d.EventID], bodies)
			continue
		}
		if string(d.Body) != bodies[d.EventID] {
			t.Errorf("dead letter %s body %q, want %q", d.EventID, d.Body, bodies[d.EventID])
		}
		for k, a := range attrs {
			var want any = aws.ToString(a.StringValue)
			if aws.ToString(a.DataType) == "Binary" {
				want = a.BinaryValue
			}
			if fmt.Sprint(d.Headers[k]) != fmt.Sprint(want) {
				t.Errorf("dead letter %s: attribute %s = %#v, want %#v", d.EventID, k, d.Headers[k], want)
			}
		}
		rec, err := evidence.Decode(d.Headers)
		if err != nil {
			t.Errorf("evidence of %s: %v", d.EventID, err)
		}
		wantReason := evidence.ReasonPermanent
		if forged {
			wantReason = evidence.ReasonInvalidRetryCount
		}
		if rec.Reason != wantReason || rec.Source != "sqs/"+qc.Name || rec.Consumer != "sqs-test" || rec.Host == "" || rec.DeadLetteredAt.IsZero() {
			t.Errorf("evidence of %s: reason %s source %s consumer %s host %q at %v, want %s from sqs/%s by sqs-test", d.EventID,
				rec.Reason, rec.Source, rec.Consumer, rec.Host, rec.DeadLetteredAt, wantReason, qc.Name)
		}
		if wantReason == evidence.ReasonPermanent && !strings.Contains(rec.ErrorMessage, "unsupported order kind") {
			t.Errorf("evidence of %s: error message %q", d.EventID, rec.ErrorMessage)
		}
	}
}

// TestLongDelayIsAConfigurationError: SQS's DelaySeconds stops at 15
// minutes, so a retry delay above it is refused when the queue is
// declared, naming the queue and the limit; and a FIFO queue (no
// per-message delay) refuses retries.
func TestLongDelayIsAConfigurationError(t *testing.T) {
	t.Parallel()
	tr := open(t)
	qc := lily.QueueConfig{Name: "orders-long", Transport: "sqs", RetryAttempts: 3, RetryDelaysMillis: []int64{60000, 600000, 1800000}}.WithDefaults()
	err := tr.Declare(context.Background(), &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}})
	if err == nil || !strings.Contains(err.Error(), "orders-long") || !strings.Contains(err.Error(), "15m0s") {
		t.Errorf("declare with a 30 min delay: %v, want an error naming the queue and the 15m limit", err)
	}
	fifo := lily.QueueConfig{Name: "orders-ret.fifo", Transport: "sqs", RetryAttempts: 1}.WithDefaults()
	err = tr.Declare(context.Background(), &transport.DeclareParams{Queues: []transport.QueueSpec{fifo.Spec()}})
	if err == nil || !strings.Contains(err.Error(), "orders-ret.fifo") || !strings.Contains(err.Error(), "retry_attempts = 0") {
		t.Errorf("declare a FIFO queue with retries: %v, want an error naming the queue and the fix", err)
	}
}
