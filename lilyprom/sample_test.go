package lilyprom_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/lilyprom"
	"github.com/lily-mq/lily/transport/transporttest"
)

// hungBroker answers nothing until release is closed, as a loaded broker
// that takes longer than a scrape's timeout.
type hungBroker struct {
	release chan struct{}
	n       int64
}

func (b hungBroker) wait(ctx context.Context) error {
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b hungBroker) InFlight(ctx context.Context, _ string) (int64, error) {
	return b.n, b.wait(ctx)
}

func (b hungBroker) DeadLetterDepth(ctx context.Context, _ string) (int64, error) {
	return b.n, b.wait(ctx)
}

// gauge returns the value of metric's only series, and whether there is one.
func gauge(t *testing.T, reg prometheus.Gatherer, metric string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == metric && len(mf.Metric) == 1 {
			return mf.Metric[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestCatalogCollectorDoesNotWaitOnTheBroker: while the broker does not
// answer, a scrape serves the catalog's gauges (what LilyDLQNotEmpty
// alarms on) without the ledger's unaccounted figure; once the count that
// hung finishes, the next scrapes serve it.
func TestCatalogCollectorDoesNotWaitOnTheBroker(t *testing.T) {
	s := transporttest.TempCatalog(t)
	if err := s.Insert(context.Background(), entry("orders.created", "o1", catalog.StatePending, time.Hour)); err != nil {
		t.Fatal(err)
	}
	addCounts(t, s, "orders.created", 3, 1) // 3 − 1 acked − 1 held − 0 in flight = 1 lost
	broker := hungBroker{release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	reg.MustRegister(lilyprom.NewCatalogCollector(s, broker, lilyprom.CatalogOptions{BrokerWait: 10 * time.Millisecond}))

	if v, ok := gauge(t, reg, lilyprom.MetricDLQAlarming); !ok || v != 1 {
		t.Errorf("alarming entries with the broker hung: %v (served %v), want 1", v, ok)
	}
	if n, err := testutil.GatherAndCount(reg, lilyprom.MetricLedgerUnaccounted); err != nil || n != 0 {
		t.Errorf("%s with the broker hung: %d series (%v), want none rather than a guess", lilyprom.MetricLedgerUnaccounted, n, err)
	}
	if v, ok := gauge(t, reg, lilyprom.MetricCatalogUp); !ok || v != 1 {
		t.Errorf("catalog up with the broker hung: %v, want 1: a slow broker is not a failed catalog", v)
	}
	close(broker.release)
	waittest.ForState(t, "the count that hung to reach a scrape", func() (bool, string) {
		v, ok := gauge(t, reg, lilyprom.MetricLedgerUnaccounted)
		return ok && v == 1, fmt.Sprintf("served %v, value %v", ok, v)
	})
}

// TestBrokerDLQCollectorDoesNotWaitOnTheBroker: the same for the broker
// DLQ depth, which is left out rather than served as a wrong zero.
func TestBrokerDLQCollectorDoesNotWaitOnTheBroker(t *testing.T) {
	broker := hungBroker{release: make(chan struct{}), n: 4}
	reg := prometheus.NewRegistry()
	reg.MustRegister(lilyprom.NewBrokerDLQCollector(broker, []string{"orders"}, 0))
	// No error either: a scrape that waited for the read would have got
	// its timeout's error.
	if n, err := testutil.GatherAndCount(reg, lilyprom.MetricBrokerDLQMessages); err != nil || n != 0 {
		t.Errorf("depth with the broker hung: %d series (%v), want none", n, err)
	}
	close(broker.release)
	waittest.ForState(t, "the depth that hung to reach a scrape", func() (bool, string) {
		v, ok := gauge(t, reg, lilyprom.MetricBrokerDLQMessages)
		return ok && v == 4, fmt.Sprintf("served %v, value %v", ok, v)
	})
}
