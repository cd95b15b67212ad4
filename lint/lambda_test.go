package lint

import (
	"strings"
	"testing"

	"github.com/lily-mq/lily/config"
)

// TestStaticLambda: a function with neither an on-failure destination nor
// a dead-letter queue draws an error; one whose SQS destination nobody
// drains a warning naming the queue and the [[foreign_dlq]] to add; one
// drained, or with a dead-letter queue, nothing.
func TestStaticLambda(t *testing.T) {
	const arn = "arn:aws:sqs:eu-west-1:123456789012:orders-failed"
	cfg := config.Config{Lambdas: []config.LambdaConfig{
		{Function: "orders"},
		{Function: "billing", OnFailure: arn},
		{Function: "shipping", DeadLetterQueue: "arn:aws:sqs:eu-west-1:123456789012:shipping-dlq"},
	}}.WithDefaults()
	r := NewReport(Static(cfg))
	if !r.Has(CodeLambdaNoFailureDestination, "orders") || !r.Has(CodeLambdaDestinationUndrained, "billing") {
		t.Fatalf("findings %v", codes(r.Findings))
	}
	for _, f := range r.Findings {
		if f.Code == CodeLambdaDestinationUndrained && (f.Severity != Warning || !strings.Contains(f.Fix, `queue = "orders-failed"`)) {
			t.Errorf("finding %+v", f)
		}
		if f.Queue == "shipping" {
			t.Errorf("shipping has a dead-letter queue: %+v", f)
		}
	}
	cfg.ForeignDLQs = []config.ForeignDLQConfig{{Queue: "orders-failed", Kind: config.ForeignLambdaDestination}}
	if r := NewReport(Static(cfg)); r.Has(CodeLambdaDestinationUndrained, "billing") {
		t.Errorf("drained destination still reported: %v", codes(r.Findings))
	}
}
