package sqs_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport/sqs"
	"github.com/lily-mq/lily/transport/sqs/sqstest"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestInFlightCountsAMessageInFlightOnce: the queue counts SQS reports
// add up to the messages the queue holds — a message in flight is in
// ApproximateNumberOfMessagesNotVisible only, not also in
// ApproximateNumberOfMessages (goaws counted it in both before sqstest
// corrected it, and the ledger read negative "lost"). Checked on the main
// queue and on its DLQ, with messages from a producer that is not Lily's.
func TestInFlightCountsAMessageInFlightOnce(t *testing.T) {
	ctx := context.Background()
	tr := open(t)
	qc := declare(t, tr, "counts", lily.QueueConfig{})
	held := map[string]*string{} // the receipt of the message in flight, by queue
	for _, q := range []string{qc.Name, sqs.DeadLetterQueue(qc.Name)} {
		url, err := tr.QueueURL(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, body := range []string{"a", "b", "c"} {
			if _, err := tr.Client().SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(body)}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := tr.Client().ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 1, VisibilityTimeout: 600})
		if err != nil || len(got.Messages) != 1 {
			t.Fatalf("receive one of %s: %v, %v", q, got, err)
		}
		attrs, err := tr.Client().GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
			AttributeNames: []types.QueueAttributeName{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"}})
		if err != nil {
			t.Fatal(err)
		}
		if v, nv := attrs.Attributes["ApproximateNumberOfMessages"], attrs.Attributes["ApproximateNumberOfMessagesNotVisible"]; v != "2" || nv != "1" {
			t.Errorf("%s: ApproximateNumberOfMessages %s, NotVisible %s; want 2 visible and 1 in flight", q, v, nv)
		}
		if n := sqstest.Depth(q); n != 3 {
			t.Errorf("%s holds %d messages, want 3", q, n)
		}
		held[q] = got.Messages[0].ReceiptHandle
	}
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 3 {
		t.Errorf("InFlight %d, %v; want 3 (2 visible + 1 in flight)", n, err)
	}
	if n, err := tr.DeadLetterDepth(ctx, qc.Name); err != nil || n != 3 {
		t.Errorf("DeadLetterDepth %d, %v; want 3", n, err)
	}
	// None left behind: delete every message, then both counts read 0.
	for q, receipt := range held {
		url, err := tr.QueueURL(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Client().DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: receipt}); err != nil {
			t.Fatal(err)
		}
		for deleted := 1; deleted < 3; {
			got, err := tr.Client().ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 600})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range got.Messages {
				if _, err := tr.Client().DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
					t.Fatal(err)
				}
				deleted++
			}
		}
	}
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("after deleting all: InFlight %d, %v", n, err)
	}
	if n, err := tr.DeadLetterDepth(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("after deleting all: DeadLetterDepth %d, %v", n, err)
	}
}

// TestReceiveHidesForTheReceivesTimeout: a message is hidden for the
// visibility timeout its ReceiveMessage asked for, not for its queue's
// (sqstest's correction of goaws, as SQS does): received for 1 s from a
// dead-letter queue created with the default 30 s, it is received again,
// counted twice, long before 30 s.
func TestReceiveHidesForTheReceivesTimeout(t *testing.T) {
	ctx := context.Background()
	tr := open(t)
	qc := declare(t, tr, "recvvis", lily.QueueConfig{})
	url, err := tr.QueueURL(ctx, sqs.DeadLetterQueue(qc.Name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Client().SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("hidden briefly")}); err != nil {
		t.Fatal(err)
	}
	receive := func() []types.Message {
		got, err := tr.Client().ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 1, VisibilityTimeout: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{"ApproximateReceiveCount"}})
		if err != nil {
			t.Fatal(err)
		}
		return got.Messages
	}
	if ms := receive(); len(ms) != 1 {
		t.Fatalf("first receive: %d messages, want 1", len(ms))
	}
	var again []types.Message
	// 15 s: half the queue's own timeout, fifteen times the one asked for.
	transporttest.WaitWithin(t, 15*time.Second, "the message received for 1 s to be visible again", func() (bool, string) {
		again = receive()
		return len(again) == 1, ""
	})
	if n := again[0].Attributes["ApproximateReceiveCount"]; n != "2" {
		t.Errorf("received again with ApproximateReceiveCount %s, want 2", n)
	}
	// Nothing lost, nothing made: the one message is still in the DLQ.
	if n := sqstest.Depth(sqs.DeadLetterQueue(qc.Name)); n != 1 {
		t.Errorf("the dead-letter queue holds %d messages, want the 1 sent", n)
	}
}
