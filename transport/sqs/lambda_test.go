package sqs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport/sqs/sqstest"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestLambdaDestinationIngest: the on-failure destination queue of a
// Lambda function's asynchronous invocations holds a record for an event
// whose retries were exhausted; the ingest takes it into the catalog —
// catalog commit, then delete — with the original event as the body, the
// invocation's request ID as the event ID, reason delivery_limit at the
// invoke count, and the function's error; the queue is empty after it.
func TestLambdaDestinationIngest(t *testing.T) {
	t.Parallel()
	tr := open(t)
	ctx := context.Background()
	queue := fmt.Sprintf("orders-onfailure-%d", time.Now().UnixNano())
	out, err := tr.Client().CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(queue)})
	if err != nil {
		t.Fatal(err)
	}
	record := `{"version":"1.0","timestamp":"2026-11-14T18:16:05.568Z",` +
		`"requestContext":{"requestId":"e4b46cbf-b738-4a8d-8880-a18cdf61200e","functionArn":"arn:aws:lambda:us-east-1:000000000000:function:orders:$LATEST","condition":"RetriesExhausted","approximateInvokeCount":3},` +
		`"requestPayload":{"order":42,"note":"<gift>"},` +
		`"responseContext":{"statusCode":200,"executedVersion":"$LATEST","functionError":"Unhandled"},` +
		`"responsePayload":{"errorMessage":"card declined","errorType":"PaymentError"}}`
	if _, err := tr.Client().SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: out.QueueUrl, MessageBody: aws.String(record)}); err != nil {
		t.Fatal(err)
	}
	cat := transporttest.TempCatalog(t)
	n, err := cat.IngestWith(ctx, tr.LambdaDestination(queue), catalog.IngestParams{Queue: queue, Foreign: "lambda-destination"})
	if err != nil || n != 1 {
		t.Fatalf("ingested %d (%v), want 1", n, err)
	}
	var entries []*catalog.Entry
	if err := cat.Each(ctx, catalog.Filter{Queue: queue}, func(e *catalog.Entry) error {
		entries = append(entries, e)
		return nil
	}); err != nil || len(entries) != 1 {
		t.Fatalf("%d entries (%v), want 1", len(entries), err)
	}
	e := entries[0]
	if string(e.Body) != `{"order":42,"note":"<gift>"}` || e.EventID != "e4b46cbf-b738-4a8d-8880-a18cdf61200e" ||
		e.Reason != string(evidence.ReasonDeliveryLimit) || e.DeliveryCount != 3 || e.ErrorType != "PaymentError" ||
		!strings.Contains(e.ErrorMessage, "card declined") || !e.DeadLetteredAt.Equal(time.Date(2026, 11, 14, 18, 16, 5, 568e6, time.UTC)) {
		t.Errorf("entry %s %q: reason %s count %d error %s %q at %v", e.EventID, e.Body, e.Reason, e.DeliveryCount, e.ErrorType, e.ErrorMessage, e.DeadLetteredAt)
	}
	if n := sqstest.Depth(queue); n != 0 {
		t.Errorf("%d records left in the destination queue, want 0", n)
	}
}
