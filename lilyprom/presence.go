package lilyprom

import (
	"context"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// Values of the state label of lily_consumer_instances.
const (
	ConsumerLive  = "live"
	ConsumerStale = "stale"
)

func queuePausedDesc() *prometheus.Desc {
	return prometheus.NewDesc(MetricQueuePaused,
		"1 while the queue is paused ('lily queue pause'): its consumers take no messages, its lag grows by choice.",
		[]string{LabelQueue}, nil)
}

func consumerInstancesDesc() *prometheus.Desc {
	return prometheus.NewDesc(MetricConsumerInstances,
		"Consumer instances by their heartbeats: live, or stale (silent for 3 heartbeat intervals: a process that died or cannot reach the catalog).",
		[]string{LabelQueue, LabelState}, nil)
}

// collectPresence sends lily_queue_paused and lily_consumer_instances for
// queues and for every queue paused or with an instance.
func (c *CatalogCollector) collectPresence(ctx context.Context, ch chan<- prometheus.Metric, queues []string) error {
	ps, err := c.store.Pauses(ctx)
	if err != nil {
		return err
	}
	cs, err := c.store.Consumers(ctx, "", c.o.Now())
	if err != nil {
		return err
	}
	paused := map[string]bool{}
	live, stale := map[string]int{}, map[string]int{}
	all := slices.Clone(queues)
	for _, p := range ps {
		paused[p.Queue] = true
		all = append(all, p.Queue)
	}
	for _, i := range cs {
		if i.Stale {
			stale[i.Queue]++
		} else {
			live[i.Queue]++
		}
		all = append(all, i.Queue)
	}
	slices.Sort(all)
	for _, q := range slices.Compact(all) {
		v := 0.0
		if paused[q] {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, v, q)
		ch <- prometheus.MustNewConstMetric(c.instances, prometheus.GaugeValue, float64(live[q]), q, ConsumerLive)
		ch <- prometheus.MustNewConstMetric(c.instances, prometheus.GaugeValue, float64(stale[q]), q, ConsumerStale)
	}
	return nil
}
