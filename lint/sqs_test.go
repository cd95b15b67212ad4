package lint

import (
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
)

// TestStaticSQSVisibility: an sqs queue whose sqs_visibility_timeout_seconds
// is not longer than its handler timeout draws a warning naming the
// setting; a longer one, or a queue on another transport, none. (The live
// SQS checks are brokers/livelint's TestSQSTraps.)
func TestStaticSQSVisibility(t *testing.T) {
	cfg := func(vis int, transport string) config.Config {
		q := lily.QueueConfig{Name: "orders", Transport: transport, Owner: "orders", HandlerTimeoutMillis: new(int64(60000))}
		return config.Config{SQSRegion: "eu-west-1", SQSVisibilityTimeoutSeconds: &vis, Queues: []lily.QueueConfig{q}}.WithDefaults()
	}
	r := NewReport(Static(cfg(60, lily.TransportSQS)))
	if !r.Has(CodeSQSVisibilityBelowHandlerTimeout, "orders") {
		t.Fatalf("no %s: %v", CodeSQSVisibilityBelowHandlerTimeout, codes(r.Findings))
	}
	for _, f := range r.Findings {
		if f.Code == CodeSQSVisibilityBelowHandlerTimeout && (f.Severity != Warning || !strings.Contains(f.What, "sqs_visibility_timeout_seconds = 1m0s") ||
			!strings.Contains(f.Fix, "at least 61 s")) {
			t.Errorf("finding %+v", f)
		}
	}
	if r := NewReport(Static(cfg(61, lily.TransportSQS))); r.Has(CodeSQSVisibilityBelowHandlerTimeout, "orders") {
		t.Errorf("61 s against 60 s: %v", codes(r.Findings))
	}
	if r := NewReport(Static(cfg(1, lily.TransportSQLite))); r.Has(CodeSQSVisibilityBelowHandlerTimeout, "orders") {
		t.Errorf("sqlite queue judged by the SQS visibility: %v", codes(r.Findings))
	}
}
