package livelint

import (
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
)

func sqsCfg(vis int, queues ...lily.QueueConfig) config.Config {
	c := config.Config{SQSRegion: "eu-west-1", SQSVisibilityTimeoutSeconds: &vis, Queues: queues}
	return c.WithDefaults()
}

// TestSQSTraps: each SQS trap is reported with its code, and a queue as
// Lily declares it has none.
func TestSQSTraps(t *testing.T) {
	q := lily.QueueConfig{Name: "orders", Transport: "sqs", DeliveryLimit: new(5), HandlerTimeoutMillis: new(int64(60000))}
	good := SQSQueueState{Queue: "orders", Exists: true, DLQExists: true,
		Attributes:    map[string]string{"VisibilityTimeout": "120", "MessageRetentionPeriod": "345600", "RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:eu-west-1:1:orders-dlq","maxReceiveCount":6}`},
		DLQAttributes: map[string]string{"MessageRetentionPeriod": "1209600"}}
	cfg := sqsCfg(120, q)
	if f := append(lint.Static(cfg), CheckSQS(cfg, []SQSQueueState{good})...); has(f, "sqs-") {
		t.Errorf("findings on a queue as Lily declares it: %+v", f)
	}
	bad := good
	bad.Attributes = map[string]string{"VisibilityTimeout": "30", "MessageRetentionPeriod": "1209600", "RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:eu-west-1:1:orders-dlq","maxReceiveCount":"5"}`}
	r := lint.NewReport(append(lint.Static(sqsCfg(30, q)), CheckSQS(cfg, []SQSQueueState{bad})...))
	for _, code := range []string{lint.CodeSQSVisibilityBelowHandlerTimeout, lint.CodeSQSMaxReceiveCountAtLimit, lint.CodeSQSDLQRetentionShort} {
		if !r.Has(code, "orders") {
			t.Errorf("no %s in %+v", code, r.Findings)
		}
	}
	none := good
	none.Attributes = map[string]string{"VisibilityTimeout": "120"}
	if r := lint.NewReport(CheckSQS(cfg, []SQSQueueState{none})); !r.Has(lint.CodeSQSNoRedrivePolicy, "orders") {
		t.Errorf("no %s in %+v", lint.CodeSQSNoRedrivePolicy, r.Findings)
	}
	if r := lint.NewReport(CheckSQS(cfg, []SQSQueueState{{Queue: "orders", Exists: true}})); !r.Has(lint.CodeSQSQueueMissing, "orders") {
		t.Errorf("no %s in %+v", lint.CodeSQSQueueMissing, r.Findings)
	}
	// A FIFO queue's DLQ keeps the age of the move: no retention trap.
	fq := lily.QueueConfig{Name: "pay.fifo", Transport: "sqs", HandlerTimeoutMillis: new(int64(60000))}
	fifo := bad
	fifo.Queue = "pay.fifo"
	if r := lint.NewReport(CheckSQS(sqsCfg(120, fq), []SQSQueueState{fifo})); r.Has(lint.CodeSQSDLQRetentionShort, "pay.fifo") {
		t.Errorf("retention trap reported on a FIFO queue: %+v", r.Findings)
	}
}

func has(fs []lint.Finding, prefix string) bool {
	for _, f := range fs {
		if len(f.Code) >= len(prefix) && f.Code[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}
