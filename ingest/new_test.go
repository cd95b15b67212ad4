package ingest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogtest"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/transport"
)

// TestNewValidates: New refuses a loop that could not work — no catalog,
// nothing to drain, a source without a drainer, an interval under
// MinInterval, a lease that could run out between two renewals — and
// fills in the defaults.
func TestNewValidates(t *testing.T) {
	cat := newCatalog(t)
	src := map[string]Source{"orders": {Drainer: &fakeDLQ{}}}
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"no catalog", Options{Sources: src}, "Catalog is nil"},
		{"no sources", Options{Catalog: cat}, "no sources"},
		{"no drainer", Options{Catalog: cat, Sources: map[string]Source{"orders": {}}}, `source "orders" has no Drainer`},
		{"interval", Options{Catalog: cat, Sources: src, Interval: time.Millisecond}, "must be at least 10ms"},
		{"ttl", Options{Catalog: cat, Sources: src, Interval: time.Second, LeaseTTL: 1500 * time.Millisecond}, "at least twice the interval"},
	} {
		if _, err := New(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	l, err := New(Options{Catalog: cat, Sources: src})
	if err != nil {
		t.Fatal(err)
	}
	if l.interval != DefaultInterval || l.ttl != DefaultLeaseTTL || l.Holder() == "" || l.log == nil || l.now == nil {
		t.Errorf("defaults: interval %s ttl %s holder %q", l.interval, l.ttl, l.Holder())
	}
	want := "ingesting the broker DLQs of 1 queue(s) every 5s (lease ingest/<queue>, ttl 30s, holder " + l.Holder() + ")"
	if l.String() != want {
		t.Errorf("String() = %q, want %q", l.String(), want)
	}
	if got := l.Queues(); len(got) != 1 || got[0] != "orders" {
		t.Errorf("Queues() = %v", got)
	}
}

// TestRunDrainsUntilStopped runs the loop without metrics or hook: it
// drains each source into the catalog, a foreign one with its reason,
// and releases its leases when stopped.
func TestRunDrainsUntilStopped(t *testing.T) {
	cat := newCatalog(t)
	own := &fakeDLQ{waiting: []*transport.Delivery{
		{Queue: "orders", Message: transport.Message{EventID: "o1", Body: []byte("1")}},
		{Queue: "orders", Message: transport.Message{EventID: "o2", Body: []byte("2")}},
	}}
	foreign := &fakeDLQ{waiting: []*transport.Delivery{
		{Queue: "billing_skipped", Message: transport.Message{EventID: "f1", Body: []byte("3")}},
	}}
	l, err := New(Options{Catalog: cat, Interval: 20 * time.Millisecond, LeaseTTL: time.Second, Sources: map[string]Source{
		"orders": {Drainer: own}, "billing_skipped": {Drainer: foreign, Foreign: "masstransit", Reason: "skipped"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done }) // the loop stops even when the wait fails
	waittest.ForState(t, "2 entries of orders and 1 of billing_skipped", func() (bool, string) {
		n, _ := catalogtest.Entries(t, cat, "orders")
		m, _ := catalogtest.Entries(t, cat, "billing_skipped")
		return n == 2 && m == 1, fmt.Sprintf("orders %d, billing_skipped %d", n, m)
	})
	if h := catalogtest.LeaseHolder(t, cat, LeasePrefix+"orders"); h != l.Holder() {
		t.Errorf("lease of orders held by %q, want %q", h, l.Holder())
	}
	cancel()
	<-done
	for _, q := range []string{"orders", "billing_skipped"} {
		if h := catalogtest.LeaseHolder(t, cat, LeasePrefix+q); h != "" {
			t.Errorf("lease of %s still held by %q after the loop stopped", q, h)
		}
	}
	err = cat.Each(context.Background(), catalog.Filter{Queue: "billing_skipped"}, func(e *catalog.Entry) error {
		if e.Reason != "skipped" {
			t.Errorf("foreign dead letter's reason %q, want skipped", e.Reason)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
