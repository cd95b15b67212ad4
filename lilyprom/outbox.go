package lilyprom

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lily-mq/lily/outbox"
)

// RelayMetrics count what an outbox relay (outbox.Relay, 'lily relay')
// published: lily_outbox_published_total{queue} (rows the transport
// confirmed), lily_outbox_publish_failures_total{queue} (rows it did not
// confirm; they are tried again) and lily_outbox_relay_errors_total
// (rounds that could not read or mark the outbox). Each relay process
// counts its own. Pass it as outbox.RelayOptions.Observer. It is safe for
// concurrent use.
type RelayMetrics struct {
	published *prometheus.CounterVec
	failed    *prometheus.CounterVec
	rounds    prometheus.Counter
}

var _ outbox.RelayObserver = (*RelayMetrics)(nil)

// NewRelayMetrics creates the relay metrics and registers them with reg
// (nil means prometheus.DefaultRegisterer).
func NewRelayMetrics(reg prometheus.Registerer) (*RelayMetrics, error) {
	m := &RelayMetrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricOutboxPublished,
			Help: "Outbox rows this relay published and the transport confirmed (at-least-once: a crash between the confirm and the mark publishes a row again, with the same event ID).",
		}, []string{LabelQueue}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricOutboxFailures,
			Help: "Outbox rows whose publish the transport did not confirm; they stay in the outbox and are tried again after the relay's backoff.",
		}, []string{LabelQueue}),
		rounds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricOutboxRoundErrors,
			Help: "Relay rounds that could not read or mark the outbox (a database error); what they took is taken again.",
		}),
	}
	if err := registerAll(reg, "relay", m.published, m.failed, m.rounds); err != nil {
		return nil, err
	}
	return m, nil
}

// Init exports the series of the given queues at zero.
func (m *RelayMetrics) Init(queues ...string) {
	for _, q := range queues {
		m.published.WithLabelValues(q)
		m.failed.WithLabelValues(q)
	}
}

// Published implements outbox.RelayObserver.
func (m *RelayMetrics) Published(queue string, n int) {
	m.published.WithLabelValues(queue).Add(float64(n))
}

// PublishFailed implements outbox.RelayObserver.
func (m *RelayMetrics) PublishFailed(queue string, n int, _ error) {
	m.failed.WithLabelValues(queue).Add(float64(n))
}

// RoundFailed implements outbox.RelayObserver.
func (m *RelayMetrics) RoundFailed(error) { m.rounds.Inc() }

// OutboxCollector is a prometheus.Collector that reads an outbox's backlog
// (outbox.Backlog) on every scrape: lily_outbox_pending{queue},
// lily_outbox_failing{queue}, lily_outbox_oldest_pending_age_seconds{queue}
// and lily_outbox_up. The oldest row's age is the alarm: it grows while
// no relay runs or every publish fails, whatever the rate.
type OutboxCollector struct {
	db      outbox.DB
	queues  []string
	timeout time.Duration
	now     func() time.Time

	pending, failing, oldest, up *prometheus.Desc
}

var _ prometheus.Collector = (*OutboxCollector)(nil)

// NewOutboxCollector returns a collector of db's outbox (a *sql.DB or a
// pgx pool, as outbox.NewRelay takes). queues are exported on every scrape
// even with nothing pending (at zero), e.g. the configured queues, so that
// alerts see them. timeout bounds one scrape's query (10s when <= 0).
func NewOutboxCollector(db outbox.DB, queues []string, timeout time.Duration) *OutboxCollector {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	q := []string{LabelQueue}
	return &OutboxCollector{
		db: db, queues: append([]string(nil), queues...), timeout: timeout, now: time.Now,
		pending: prometheus.NewDesc(MetricOutboxPending, "Outbox rows not published yet, per destination queue.", q, nil),
		failing: prometheus.NewDesc(MetricOutboxFailing, "Unpublished outbox rows with at least one publish the transport did not confirm.", q, nil),
		oldest: prometheus.NewDesc(MetricOutboxOldestAge,
			"Age of the oldest unpublished outbox row of the queue (0 with none): it grows while no relay runs or every publish fails.", q, nil),
		up: prometheus.NewDesc(MetricOutboxUp, "1 when the last scrape could read the outbox, else 0.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *OutboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.pending
	ch <- c.failing
	ch <- c.oldest
	ch <- c.up
}

// Collect implements prometheus.Collector.
func (c *OutboxCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	bs, err := outbox.Backlog(ctx, c.db)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		ch <- prometheus.NewInvalidMetric(c.pending, fmt.Errorf("lilyprom: %w", err))
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	now := c.now()
	seen := map[string]bool{}
	for _, b := range bs {
		seen[b.Queue] = true
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(b.Pending), b.Queue)
		ch <- prometheus.MustNewConstMetric(c.failing, prometheus.GaugeValue, float64(b.Failing), b.Queue)
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, max(0, now.Sub(b.Oldest).Seconds()), b.Queue)
	}
	for _, q := range c.queues {
		if !seen[q] {
			seen[q] = true
			for _, d := range []*prometheus.Desc{c.pending, c.failing, c.oldest} {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, 0, q)
			}
		}
	}
}
