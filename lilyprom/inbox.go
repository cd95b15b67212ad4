package lilyprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lily-mq/lily"
)

// inboxMetrics count what package inbox absorbed: duplicates (an event ID
// already applied), stale messages (an entity version not newer) and twins
// (a content ID already applied, on another message's first delivery).
type inboxMetrics struct {
	duplicates *prometheus.CounterVec
	stale      *prometheus.CounterVec
	twins      *prometheus.CounterVec
}

func newInboxMetrics() inboxMetrics {
	return inboxMetrics{
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricInboxDuplicates,
			Help: "Deliveries whose event ID the inbox had already applied (a redelivery, a duplicate publish, a redrive of an applied message): acked without running the effect.",
		}, []string{LabelQueue}),
		stale: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricInboxStale,
			Help: "Deliveries whose entity version was not newer than the stored one: acked as a no-op by the version guard, never applied, never dead-lettered.",
		}, []string{LabelQueue}),
		twins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricInboxTwins,
			Help: "First deliveries of a message without an ID whose content ID the inbox had already applied (a byte-identical twin, or a message published twice): acked without running the effect, with a warning. The producer should set a message_id.",
		}, []string{LabelQueue}),
	}
}

// observe counts e, a lily.EventDuplicate, lily.EventStale or lily.EventTwin.
func (m inboxMetrics) observe(e lily.Event) {
	switch e.Kind {
	case lily.EventDuplicate:
		m.duplicates.WithLabelValues(e.Queue).Inc()
	case lily.EventStale:
		m.stale.WithLabelValues(e.Queue).Inc()
	case lily.EventTwin:
		m.twins.WithLabelValues(e.Queue).Inc()
	}
}
