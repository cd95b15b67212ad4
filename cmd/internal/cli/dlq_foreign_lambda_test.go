package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/lily-mq/lily/brokers"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/transport/sqs/sqstest"
)

// TestForeignDLQLambdaDestination: a Lambda function's on-failure
// destination queue ([[foreign_dlq]] kind = "lambda-destination") holds a
// record; 'lily dlq ingest' takes it into the catalog with the original
// event as the body and the record's evidence; a redrive without --to is
// refused naming the fix, and 'lily dlq redrive --to QUEUE' sends the
// event to that SQS queue; 'lily reconcile' balances.
func TestForeignDLQLambdaDestination(t *testing.T) {
	t.Parallel()
	e, err := sqstest.Start()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := time.Now().UnixNano()
	dest, feed := fmt.Sprintf("orders-failed-%d", id), fmt.Sprintf("orders-feed-%d", id)
	cfg := writeConfig(t, fmt.Sprintf("db = %q\nsqs_endpoint = %q\nsqs_protocol = \"query\"\n[[foreign_dlq]]\nqueue = %q\nkind = \"lambda-destination\"\n",
		filepath.Join(t.TempDir(), "catalog.db"), e.URL(), dest))
	c, err := config.LoadConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	brk := brokers.New(c, brokers.Options{})
	defer brk.Close()
	tr, err := brk.SQS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	urls := map[string]string{}
	for _, q := range []string{dest, feed} {
		out, err := tr.Client().CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(q)})
		if err != nil {
			t.Fatal(err)
		}
		urls[q] = aws.ToString(out.QueueUrl)
	}
	record := `{"version":"1.0","timestamp":"2026-11-14T18:16:05.568Z","requestContext":{"requestId":"req-1","functionArn":"arn:aws:lambda:us-east-1:000000000000:function:orders","condition":"RetriesExhausted","approximateInvokeCount":3},"requestPayload":{"order":7},"responseContext":{"statusCode":200,"functionError":"Unhandled"},"responsePayload":{"errorMessage":"card declined","errorType":"PaymentError"}}`
	if _, err := tr.Client().SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(urls[dest]), MessageBody: aws.String(record)}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "dlq", "ingest", "--config", cfg, "--json")
	var ing ingestJSON
	if code != 0 || json.Unmarshal([]byte(out), &ing) != nil || ing.Total != 1 {
		t.Fatalf("ingest exit %d, want 1 ingested\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = run(t, "dlq", "show", "--config", cfg, "1")
	if code != 0 || !strings.Contains(out, `"order": 7`) || !strings.Contains(out, "PaymentError: card declined") || !strings.Contains(out, "count 3") {
		t.Errorf("show 1 (req-1): exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := run(t, "dlq", "redrive", "--config", cfg, "--queue", dest, "--include-crashers"); code == 0 || !strings.Contains(out+errOut, "--to") {
		t.Errorf("redrive without --to: exit %d, want a refusal naming --to\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := run(t, "dlq", "redrive", "--config", cfg, "--queue", dest, "--include-crashers", "--to", feed); code != 0 {
		t.Fatalf("redrive --to %s: exit %d\n%s\n%s", feed, code, out, errOut)
	}
	got, err := tr.Client().ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(urls[feed]), MaxNumberOfMessages: 10})
	if err != nil || len(got.Messages) != 1 || aws.ToString(got.Messages[0].Body) != `{"order":7}` {
		t.Fatalf("feed queue after the redrive: %v %+v, want the event alone", err, got)
	}
	if code, row, errOut := reconcileRow(t, cfg, dest); code != 0 || row.Accepted != 1 || row.Acked != 1 || row.Lost != 0 {
		t.Errorf("reconcile exit %d, ledger of %s %+v, want accepted 1 = 1 redriven\n%s", code, dest, row, errOut)
	}
}
