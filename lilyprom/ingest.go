package lilyprom

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lily-mq/lily/transport"
)

// IngestMetrics count what a continuous ingest (the loop of 'lily serve'
// that drains broker dead-letter queues into the catalog) does. Each
// replica counts its own: sum lily_ingest_total over the replicas for the
// queue's ingest rate; lily_ingest_lease_held shows which replica drains a
// queue. It is safe for concurrent use.
type IngestMetrics struct {
	drained *prometheus.CounterVec
	failed  *prometheus.CounterVec
	lease   *prometheus.GaugeVec
	last    *prometheus.GaugeVec
}

// NewIngestMetrics creates the ingest metrics and registers them with reg
// (nil means prometheus.DefaultRegisterer).
func NewIngestMetrics(reg prometheus.Registerer) (*IngestMetrics, error) {
	m := &IngestMetrics{
		drained: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricIngested,
			Help: "Dead letters this process drained from the queue's broker DLQ into the catalog (committed, then removed from the broker).",
		}, []string{LabelQueue}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricIngestErrors,
			Help: "Ingest passes of this process that failed (broker or catalog error; the dead letters stay in the broker).",
		}, []string{LabelQueue}),
		lease: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricIngestLeaseHeld,
			Help: "1 while this process holds the queue's ingest lease (it is the replica draining the queue's broker DLQ), else 0.",
		}, []string{LabelQueue}),
		last: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricIngestLastSuccess,
			Help: "Unix time of this process's last ingest pass of the queue that drained its broker DLQ to the end; 0 before the first.",
		}, []string{LabelQueue}),
	}
	if err := registerAll(reg, "ingest", m.drained, m.failed, m.lease, m.last); err != nil {
		return nil, err
	}
	return m, nil
}

// Init exports the series of the given queues at zero.
func (m *IngestMetrics) Init(queues ...string) {
	for _, q := range queues {
		m.drained.WithLabelValues(q)
		m.failed.WithLabelValues(q)
		m.lease.WithLabelValues(q).Set(0)
		m.last.WithLabelValues(q)
	}
}

// Drained counts n dead letters of queue drained into the catalog.
func (m *IngestMetrics) Drained(queue string, n int) {
	m.drained.WithLabelValues(queue).Add(float64(n))
}

// Failed counts a failed ingest pass of queue.
func (m *IngestMetrics) Failed(queue string) { m.failed.WithLabelValues(queue).Inc() }

// LeaseHeld sets whether this process holds queue's ingest lease.
func (m *IngestMetrics) LeaseHeld(queue string, held bool) {
	v := 0.0
	if held {
		v = 1
	}
	m.lease.WithLabelValues(queue).Set(v)
}

// Succeeded records a pass of queue that drained its DLQ to the end at.
func (m *IngestMetrics) Succeeded(queue string, at time.Time) {
	m.last.WithLabelValues(queue).Set(float64(at.UnixMilli()) / 1e3)
}

// BrokerDLQCollector is a prometheus.Collector that asks the broker, on
// every scrape, how many dead letters of each queue wait in its
// dead-letter queue or topic and are not in the catalog yet:
// lily_broker_dlq_messages{queue} (RabbitMQ: the ready messages of
// <queue>.dlq.v2; Kafka: the dead-letter topic's records past the drain
// group's committed offsets). With a continuous ingest running it stays
// near 0; a value that stays up means the ingest stopped. A scrape waits
// up to DefaultBrokerWait for the broker's answers, else serves the last
// ones that came.
type BrokerDLQCollector struct {
	queues []string
	depths *sampler[[]depthRead]
	depth  *prometheus.Desc
}

// depthRead is one queue's broker DLQ depth as read.
type depthRead struct {
	n   int64
	err error
}

var _ prometheus.Collector = (*BrokerDLQCollector)(nil)

// NewBrokerDLQCollector returns a collector of the broker DLQ depth of
// queues (the configured queues that live on a broker), read through
// counter (e.g. the transports' transport.DeadLetterCounter). timeout
// bounds one scrape's queries (10s when <= 0). A queue whose depth cannot
// be read is reported to the registry and left out of the scrape.
func NewBrokerDLQCollector(counter transport.DeadLetterCounter, queues []string, timeout time.Duration) *BrokerDLQCollector {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	queues = append([]string(nil), queues...)
	read := func(ctx context.Context) []depthRead {
		out := make([]depthRead, len(queues))
		for i, q := range queues {
			out[i].n, out[i].err = counter.DeadLetterDepth(ctx, q)
		}
		return out
	}
	return &BrokerDLQCollector{
		queues: queues, depths: &sampler[[]depthRead]{read: read, timeout: timeout, wait: DefaultBrokerWait},
		depth: prometheus.NewDesc(MetricBrokerDLQMessages,
			"Dead letters waiting in the queue's broker DLQ (RabbitMQ <queue>.dlq.v2, Kafka dead-letter topic past the drain group), not in the catalog yet.",
			[]string{LabelQueue}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *BrokerDLQCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.depth }

// Collect implements prometheus.Collector.
func (c *BrokerDLQCollector) Collect(ch chan<- prometheus.Metric) {
	reads, ok := c.depths.get()
	if !ok {
		return // the broker has not answered yet: no depth rather than a wrong one
	}
	for i, q := range c.queues {
		if err := reads[i].err; err != nil {
			ch <- prometheus.NewInvalidMetric(c.depth, fmt.Errorf("lilyprom: broker DLQ depth of %s: %w", q, err))
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(reads[i].n), q)
	}
}
