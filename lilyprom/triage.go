package lilyprom

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lily-mq/lily/catalog"
)

// MetricDLQAlarming is the gauge of held entries (pending, parked,
// needs_manual) whose triage status is not known_issue — neither their own
// nor their group's ('lily dlq triage'). LilyDLQNotEmpty fires on it, so a
// group marked known_issue stops that alarm for its fingerprint only.
const MetricDLQAlarming = "lily_dlq_alarming_entries"

func alarmingDesc() *prometheus.Desc {
	return prometheus.NewDesc(MetricDLQAlarming,
		"Held dead-letter entries (pending, parked, needs_manual) not triaged known_issue (their own status, else their group's): what LilyDLQNotEmpty alarms on.",
		[]string{LabelQueue}, nil)
}

// collectAlarming sends lily_dlq_alarming_entries for each queue: its held
// entries less those whose triage status is known_issue.
func (c *CatalogCollector) collectAlarming(ctx context.Context, ch chan<- prometheus.Metric, queues []string, counts map[string]map[catalog.State]int64) error {
	known, err := c.store.KnownIssueHeld(ctx)
	if err != nil {
		return err
	}
	for _, q := range queues {
		var held int64
		for _, st := range catalog.HeldStates {
			held += counts[q][st]
		}
		ch <- prometheus.MustNewConstMetric(c.alarming, prometheus.GaugeValue, float64(max(0, held-known[q])), q)
	}
	return nil
}
