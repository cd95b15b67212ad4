package lint

import (
	"strings"
	"testing"

	"github.com/lily-mq/lily/config"
)

// TestStaticFunctions: a Functions trigger queue whose maxDequeueCount is
// 1, or above 20, draws a warning naming it; one whose dequeues, spaced by
// visibilityTimeout, end before expected_outage draws an error with the
// planner's count and a fix that covers the outage; Functions' defaults
// with no expected outage draw nothing.
func TestStaticFunctions(t *testing.T) {
	entry := func(max, vis int, outage string) config.Config {
		return config.Config{ForeignDLQs: []config.ForeignDLQConfig{{Queue: "orders", Kind: config.ForeignAzureFunctions,
			MaxDequeueCount: max, VisibilityTimeoutSeconds: vis, ExpectedOutage: outage}}}.WithDefaults()
	}
	if r := NewReport(Static(entry(1, 0, ""))); !r.Has(CodeFunctionsMaxDequeueOne, "orders") {
		t.Errorf("max_dequeue_count 1: %v", codes(r.Findings))
	}
	if r := NewReport(Static(entry(30, 0, ""))); !r.Has(CodeFunctionsMaxDequeueHigh, "orders") {
		t.Errorf("max_dequeue_count 30: %v", codes(r.Findings))
	}
	r := NewReport(Static(entry(5, 60, "10m")))
	if !r.Has(CodeFunctionsRetrySpanShort, "orders") {
		t.Fatalf("5 dequeues 60 s apart against a 10 min outage: %v", codes(r.Findings))
	}
	for _, f := range r.Findings {
		if f.Code == CodeFunctionsRetrySpanShort && (f.Severity != Error || !strings.Contains(f.What, "span 240 s") ||
			!strings.Contains(f.Why, "first 360 s") || !strings.Contains(f.Fix, "at least 150 s") || !strings.Contains(f.Fix, "maxDequeueCount to 11")) {
			t.Errorf("finding %+v", f)
		}
	}
	if r := NewReport(Static(entry(5, 150, "10m"))); r.Has(CodeFunctionsRetrySpanShort, "orders") {
		t.Errorf("5 dequeues 150 s apart cover 10 min: %v", codes(r.Findings))
	}
	for _, code := range []string{CodeFunctionsMaxDequeueOne, CodeFunctionsMaxDequeueHigh, CodeFunctionsRetrySpanShort} {
		if r := NewReport(Static(entry(0, 0, ""))); r.Has(code, "orders") {
			t.Errorf("Functions' defaults drew %s", code)
		}
	}
}
