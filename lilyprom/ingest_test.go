package lilyprom_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lily-mq/lily/lilyprom"
)

// depths is a transport.DeadLetterCounter with fixed answers.
type depths map[string]int64

func (d depths) DeadLetterDepth(_ context.Context, q string) (int64, error) {
	n, ok := d[q]
	if !ok {
		return 0, errors.New("no such queue on the broker")
	}
	return n, nil
}

func TestBrokerDLQCollector(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(lilyprom.NewBrokerDLQCollector(depths{"orders": 7, "payments": 0}, []string{"orders", "payments"}, 0))
	want := `
# HELP lily_broker_dlq_messages Dead letters waiting in the queue's broker DLQ (RabbitMQ <queue>.dlq.v2, Kafka dead-letter topic past the drain group), not in the catalog yet.
# TYPE lily_broker_dlq_messages gauge
lily_broker_dlq_messages{queue="orders"} 7
lily_broker_dlq_messages{queue="payments"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// A queue the broker cannot answer for is reported, the others served.
	reg = prometheus.NewRegistry()
	reg.MustRegister(lilyprom.NewBrokerDLQCollector(depths{"orders": 3}, []string{"gone", "orders"}, time.Second))
	mfs, err := reg.Gather()
	if err == nil || !strings.Contains(err.Error(), "broker DLQ depth of gone") {
		t.Errorf("gather error %v, want the failing queue named", err)
	}
	if len(mfs) != 1 || len(mfs[0].Metric) != 1 || mfs[0].Metric[0].GetGauge().GetValue() != 3 {
		t.Errorf("served %v, want orders = 3", mfs)
	}
}

func TestIngestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := lilyprom.NewIngestMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lilyprom.NewIngestMetrics(reg); err == nil {
		t.Error("a second IngestMetrics on one registry was accepted")
	}
	m.Init("orders", "payments")
	m.Drained("orders", 5)
	m.Drained("orders", 2)
	m.Failed("payments")
	m.LeaseHeld("orders", true)
	m.Succeeded("orders", time.UnixMilli(1_700_000_000_500))
	want := `
# HELP lily_ingest_lease_held 1 while this process holds the queue's ingest lease (it is the replica draining the queue's broker DLQ), else 0.
# TYPE lily_ingest_lease_held gauge
lily_ingest_lease_held{queue="orders"} 1
lily_ingest_lease_held{queue="payments"} 0
# HELP lily_ingest_total Dead letters this process drained from the queue's broker DLQ into the catalog (committed, then removed from the broker).
# TYPE lily_ingest_total counter
lily_ingest_total{queue="orders"} 7
lily_ingest_total{queue="payments"} 0
# HELP lily_ingest_errors_total Ingest passes of this process that failed (broker or catalog error; the dead letters stay in the broker).
# TYPE lily_ingest_errors_total counter
lily_ingest_errors_total{queue="orders"} 0
lily_ingest_errors_total{queue="payments"} 1
# HELP lily_ingest_last_success_timestamp_seconds Unix time of this process's last ingest pass of the queue that drained its broker DLQ to the end; 0 before the first.
# TYPE lily_ingest_last_success_timestamp_seconds gauge
lily_ingest_last_success_timestamp_seconds{queue="orders"} 1.7000000005e+09
lily_ingest_last_success_timestamp_seconds{queue="payments"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestHookBrokerDeadLettered(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := lilyprom.NewHook(reg)
	if err != nil {
		t.Fatal(err)
	}
	h.BrokerDeadLettered("orders", "delivery_limit")
	h.BrokerDeadLettered("orders", "delivery_limit")
	h.BrokerDeadLettered("orders", "no-such-reason")
	c, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range c {
		if mf.GetName() != lilyprom.MetricDLQInflow {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == lilyprom.LabelReason {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	if got["delivery_limit"] != 2 || got[lilyprom.Other] != 1 {
		t.Errorf("inflow %v, want delivery_limit 2, other 1", got)
	}
}
