package lilyprom

import (
	"os"
	"strings"
	"testing"
)

// TestMetricNamesDocumented checks that every metric name, and every value
// of lily_messages_total's outcome label, is in the package documentation
// and the table of docs/metrics.md.
func TestMetricNamesDocumented(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{MetricMessages, MetricHandlerDuration, MetricRetriesAtAck, MetricDLQInflow, MetricDLQRefused, MetricBreakerState, MetricAbandoned, MetricRedrive,
		MetricDLQEntries, MetricDLQOldestAge, MetricDLQRetention, MetricLedgerUnaccounted, MetricCatalogUp,
		MetricBrokerDLQMessages, MetricIngested, MetricIngestErrors, MetricIngestLeaseHeld, MetricIngestLastSuccess,
		MetricInboxDuplicates, MetricInboxStale, MetricInboxTwins, MetricQueuePaused, MetricConsumerInstances}
	for _, n := range names {
		if !strings.Contains(string(doc), n) {
			t.Errorf("%s is not in the package documentation (doc.go)", n)
		}
		if !strings.Contains(string(readme), "| `"+n+"` |") {
			t.Errorf("%s is not in the metrics table of docs/metrics.md", n)
		}
	}
	for _, o := range MessageOutcomes {
		if !strings.Contains(string(readme), "`"+o+"`") || !strings.Contains(string(doc), o) {
			t.Errorf("outcome %s of %s is not documented in doc.go and docs/metrics.md", o, MetricMessages)
		}
	}
}
