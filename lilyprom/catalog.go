package lilyprom

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
)

// CatalogOptions configure a CatalogCollector. The zero value is usable.
type CatalogOptions struct {
	// Queues are exported on every scrape even when the catalog has
	// nothing of them yet (all gauges at zero), e.g. the configured
	// queues, so that alerts see them. Defaults to none: the queues found
	// in the catalog's entries and ledger.
	Queues []string
	// Retention is each queue's dlq_retention_hours (QueueConfig.Settings),
	// exported as lily_dlq_retention_seconds so that a dashboard draws the
	// oldest entry's age against its deadline. Queues not in it are not
	// exported.
	Retention map[string]time.Duration
	// Timeout bounds the queries of one scrape. Defaults to 10s.
	Timeout time.Duration
	// BrokerWait bounds how long a scrape waits for the ledger's in-flight
	// counts (the counter asks the broker); past it the scrape serves the
	// catalog's gauges at once and lily_ledger_unaccounted from the last
	// count that finished. Defaults to DefaultBrokerWait.
	BrokerWait time.Duration
	// Now returns the current time, for entry ages. Defaults to time.Now.
	Now func() time.Time
}

// CatalogCollector is a prometheus.Collector that reads the dead-letter
// catalog on every scrape: lily_dlq_entries, lily_dlq_oldest_entry_age_seconds,
// lily_ledger_unaccounted and lily_catalog_up (see the package
// documentation). The only state it keeps between scrapes is the last
// ledger read with in-flight counts (CatalogOptions.BrokerWait).
type CatalogCollector struct {
	store   *catalog.Store
	counter transport.InFlightCounter
	o       CatalogOptions
	ledger  *sampler[ledgerRead]

	entries, oldest, unaccounted, held, up *prometheus.Desc
	retention                              *prometheus.Desc
	alarming                               *prometheus.Desc // triage.go
	paused, instances                      *prometheus.Desc // presence.go
}

var _ prometheus.Collector = (*CatalogCollector)(nil)

// catalogStates are the values of the state label, in a fixed order.
var catalogStates = []catalog.State{catalog.StatePending, catalog.StateParked, catalog.StateNeedsManual,
	catalog.StateRedriven, catalog.StateDiscarded, catalog.StateErased}

// NewCatalogCollector returns a collector of store's work list and ledger.
// counter supplies the ledger's in-flight figures (the transport, or one
// counter per queue for broker queues, as 'lily reconcile' uses); with nil,
// lily_ledger_unaccounted is not exported. Register it with a registry,
// next to a Hook.
func NewCatalogCollector(store *catalog.Store, counter transport.InFlightCounter, o CatalogOptions) *CatalogCollector {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.BrokerWait <= 0 {
		o.BrokerWait = DefaultBrokerWait
	}
	o.Queues = append([]string(nil), o.Queues...)
	o.Retention = maps.Clone(o.Retention)
	lr := &sampler[ledgerRead]{timeout: o.Timeout, wait: o.BrokerWait, read: func(ctx context.Context) ledgerRead {
		rows, err := ledger.New(store).Rows(ctx, counter)
		return ledgerRead{rows, err}
	}}
	return &CatalogCollector{
		store: store, counter: counter, o: o, ledger: lr,
		entries: prometheus.NewDesc(MetricDLQEntries,
			"Dead-letter catalog entries by state (pending, parked and needs_manual are the held work list).",
			[]string{LabelQueue, LabelState}, nil),
		oldest: prometheus.NewDesc(MetricDLQOldestAge,
			"Age in seconds of the oldest held entry (pending, parked, needs_manual) since it was dead-lettered; 0 when none.",
			[]string{LabelQueue}, nil),
		unaccounted: prometheus.NewDesc(MetricLedgerUnaccounted,
			"Ledger: accepted - acked - dead_lettered - discarded - in_flight ('lily reconcile' lost); positive = messages unaccounted for.",
			[]string{LabelQueue}, nil),
		retention: prometheus.NewDesc(MetricDLQRetention,
			"The queue's dlq_retention_hours in seconds: the deadline of lily_dlq_oldest_entry_age_seconds.",
			[]string{LabelQueue}, nil),
		held: prometheus.NewDesc(MetricHeldKeys,
			"Keys held by ordering park or block: their later messages wait behind a dead-lettered head ('lily dlq parked').",
			[]string{LabelQueue}, nil),
		alarming: alarmingDesc(),
		paused:   queuePausedDesc(), instances: consumerInstancesDesc(),
		up: prometheus.NewDesc(MetricCatalogUp,
			"1 when every catalog query of the scrape succeeded, else 0.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *CatalogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.entries
	ch <- c.oldest
	ch <- c.unaccounted
	ch <- c.held
	ch <- c.retention
	ch <- c.alarming
	ch <- c.paused
	ch <- c.instances
	ch <- c.up
}

// Collect implements prometheus.Collector: it queries the catalog and
// sends the gauges. A failed query sets lily_catalog_up to 0 and is
// reported to the registry; what did succeed is still sent.
func (c *CatalogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.o.Timeout)
	defer cancel()
	err := c.collect(ctx, ch)
	up := 1.0
	if err != nil {
		up = 0
		ch <- prometheus.NewInvalidMetric(c.up, fmt.Errorf("lilyprom: read the catalog: %w", err))
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
}

func (c *CatalogCollector) collect(ctx context.Context, ch chan<- prometheus.Metric) error {
	counts, err := c.stateCounts(ctx)
	if err != nil {
		return err
	}
	var rows []ledger.Row
	var errs []error
	set := map[string]bool{}
	read, counted := ledgerRead{}, false
	if c.counter != nil {
		read, counted = c.ledger.get()
		rows = read.rows
		if read.err != nil {
			errs = append(errs, read.err)
		}
	}
	if !counted || read.err != nil { // the ledger's queues all the same
		if err := c.ledgerQueues(ctx, set); err != nil {
			errs = append(errs, err)
		}
	}
	for _, q := range c.o.Queues {
		set[q] = true
	}
	for q := range counts {
		set[q] = true
	}
	held, err := c.heldKeys(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for q := range held {
		set[q] = true
	}
	for _, r := range rows {
		set[r.Queue] = true
	}
	queues := make([]string, 0, len(set))
	for q := range set {
		queues = append(queues, q)
	}
	sort.Strings(queues)
	now := c.o.Now()
	for _, q := range queues {
		for _, st := range catalogStates {
			ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(counts[q][st]), q, string(st))
		}
		age, err := c.oldestAge(ctx, q, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age, q)
	}
	for _, q := range slices.Sorted(maps.Keys(c.o.Retention)) {
		ch <- prometheus.MustNewConstMetric(c.retention, prometheus.GaugeValue, c.o.Retention[q].Seconds(), q)
	}
	if err := c.collectAlarming(ctx, ch, queues, counts); err != nil {
		errs = append(errs, err)
	}
	if held != nil {
		for _, q := range queues {
			ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(held[q]), q)
		}
	}
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(c.unaccounted, prometheus.GaugeValue, float64(r.Lost), r.Queue)
	}
	if err := c.collectPresence(ctx, ch, queues); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ledgerRead is one read of the ledger with the broker's in-flight counts.
type ledgerRead struct {
	rows []ledger.Row
	err  error
}

// stateCounts counts the entries per queue and state in one pass over the
// (queue, state) index. A state outside the six is not exported.
func (c *CatalogCollector) stateCounts(ctx context.Context) (map[string]map[catalog.State]int64, error) {
	rows, err := c.store.DB().QueryContext(ctx,
		`SELECT queue, state, COUNT(*) FROM lily_dlq_entries GROUP BY queue, state`)
	if err != nil {
		return nil, fmt.Errorf("count entries by queue and state: %w", err)
	}
	defer rows.Close()
	out := map[string]map[catalog.State]int64{}
	for rows.Next() {
		var q, st string
		var n int64
		if err := rows.Scan(&q, &st, &n); err != nil {
			return nil, fmt.Errorf("count entries by queue and state: %w", err)
		}
		if out[q] == nil {
			out[q] = map[catalog.State]int64{}
		}
		out[q][catalog.State(st)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count entries by queue and state: %w", err)
	}
	return out, nil
}

// heldKeys counts the held keys (ordering park and block) per queue.
func (c *CatalogCollector) heldKeys(ctx context.Context) (map[string]int64, error) {
	rows, err := c.store.DB().QueryContext(ctx, `SELECT queue, COUNT(*) FROM lily_held_keys GROUP BY queue`)
	if err != nil {
		return nil, fmt.Errorf("count held keys: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var q string
		var n int64
		if err := rows.Scan(&q, &n); err != nil {
			return nil, fmt.Errorf("count held keys: %w", err)
		}
		out[q] = n
	}
	return out, rows.Err()
}

// ledgerQueues adds the queues of the ledger to set (the ledger itself is
// not read without an in-flight counter).
func (c *CatalogCollector) ledgerQueues(ctx context.Context, set map[string]bool) error {
	rows, err := c.store.DB().QueryContext(ctx, `SELECT queue FROM lily_ledger`)
	if err != nil {
		return fmt.Errorf("list the ledger's queues: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var q string
		if err := rows.Scan(&q); err != nil {
			return fmt.Errorf("list the ledger's queues: %w", err)
		}
		set[q] = true
	}
	return rows.Err()
}

// oldestAge returns the age in seconds of queue's oldest held entry, 0
// when it holds none.
func (c *CatalogCollector) oldestAge(ctx context.Context, queue string, now time.Time) (float64, error) {
	oldest, err := c.store.OldestHeld(ctx, queue)
	if err != nil || oldest.IsZero() {
		return 0, err
	}
	return max(now.Sub(oldest).Seconds(), 0), nil
}
