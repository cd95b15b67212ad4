package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
)

// Defaults of Options, and the names of the leases.
const (
	// DefaultInterval is how often each queue is drained.
	DefaultInterval = 5 * time.Second
	// DefaultLeaseTTL is how long a replica's lease of a queue lasts
	// unrenewed.
	DefaultLeaseTTL = 30 * time.Second
	// MinInterval is the shortest interval New accepts.
	MinInterval = 10 * time.Millisecond
	// LeasePrefix names the ingest leases in the catalog: "ingest/<queue>".
	LeasePrefix = "ingest/"
	// batch is the most dead letters committed in one transaction; each
	// batch renews the lease.
	batch = 256
)

// Source is one dead-letter queue a Loop drains.
type Source struct {
	// Drainer drains the queue's dead letters: a broker transport (its
	// dead-letter queue or topic), or a foreign dead-letter queue.
	Drainer transport.DeadLetterDrainer
	// Foreign, when set, is the kind of a foreign dead-letter queue
	// ([[foreign_dlq]]: "masstransit", "x-death", "nservicebus"): its dead
	// letters are ingested with that kind, and the ledger counts them
	// accepted (catalog.IngestParams.Foreign).
	Foreign string
	// Reason, when set, is the reason of the dead letters without Lily's
	// evidence (catalog.IngestParams.Reason; config.ForeignDLQConfig.Reason).
	Reason string
}

// Metrics is told what a Loop does, per queue; *lilyprom.IngestMetrics
// implements it (lily_ingest_total, lily_ingest_errors_total,
// lily_ingest_lease_held, lily_ingest_last_success_timestamp_seconds).
type Metrics interface {
	// Init starts the series of the queues at zero.
	Init(queues ...string)
	// Drained counts n dead letters moved into the catalog.
	Drained(queue string, n int)
	// Succeeded records a pass that drained the queue to its end.
	Succeeded(queue string, at time.Time)
	// Failed counts a pass that failed.
	Failed(queue string)
	// LeaseHeld says whether this replica holds the queue's lease.
	LeaseHeld(queue string, held bool)
}

// Hook is told of every dead letter the broker made by itself (delivery
// limit, expiry, rejection: no Lily evidence) as it enters the catalog;
// *lilyprom.Hook implements it (lily_dlq_inflow_total).
type Hook interface {
	BrokerDeadLettered(queue, reason string)
}

// Options configure a Loop.
type Options struct {
	// Catalog is where the dead letters go, and where the leases are.
	// Required.
	Catalog *catalog.Store
	// Sources are the queues to drain, by name. Required: at least one.
	Sources map[string]Source
	// Holder names this replica in the leases. Defaults to
	// catalog.LeaseHolder(), unique to the process.
	Holder string
	// Interval is how often each queue is drained: at least MinInterval.
	// Defaults to DefaultInterval.
	Interval time.Duration
	// LeaseTTL is how long the lease of a queue lasts unrenewed: at least
	// twice Interval, so that the holder renews it before it runs out.
	// Defaults to DefaultLeaseTTL.
	LeaseTTL time.Duration
	// Logger receives what the loop does: leases taken, lost and
	// released, batches drained, failures (each new one a warning, its
	// repetitions at debug level). Defaults to slog.Default().
	Logger *slog.Logger
	// Metrics, if set, is told what the loop does.
	Metrics Metrics
	// Hook, if set, is told of the broker-made dead letters ingested.
	Hook Hook
	// Now returns the current time, for the entries and the leases.
	// Defaults to time.Now.
	Now func() time.Time
}

// Loop drains its sources into the catalog, continuously: one goroutine
// per queue passes every interval. A pass first takes (or renews) the
// queue's lease in the catalog, "ingest/<queue>", so that of several
// replicas on one catalog exactly one drains each queue at a time; every
// batch it commits renews the lease in the batch's own transaction (a
// replica that lost its lease commits nothing). A replica that stops
// releases its leases; one that dies hands over when its leases expire
// (LeaseTTL).
type Loop struct {
	cat      *catalog.Store
	sources  map[string]Source
	holder   string
	interval time.Duration
	ttl      time.Duration
	log      *slog.Logger
	metrics  Metrics
	hook     Hook // counts broker-made dead letters in the inflow; may be nil
	now      func() time.Time
}

// New returns the loop of o, with o's defaults applied. It starts
// nothing: Run does.
func New(o Options) (*Loop, error) {
	if o.Catalog == nil {
		return nil, errors.New("ingest: Options.Catalog is nil")
	}
	if len(o.Sources) == 0 {
		return nil, errors.New("ingest: no sources to drain")
	}
	for q, s := range o.Sources {
		if s.Drainer == nil {
			return nil, fmt.Errorf("ingest: source %q has no Drainer", q)
		}
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	switch {
	case o.Interval < MinInterval:
		return nil, fmt.Errorf("ingest: interval %s: must be at least %s", o.Interval, MinInterval)
	case o.LeaseTTL < 2*o.Interval:
		return nil, fmt.Errorf("ingest: lease TTL %s: must be at least twice the interval %s, so that the holder renews its lease before it runs out",
			o.LeaseTTL, o.Interval)
	}
	l := &Loop{cat: o.Catalog, sources: map[string]Source{}, holder: o.Holder, interval: o.Interval, ttl: o.LeaseTTL,
		log: o.Logger, metrics: o.Metrics, hook: o.Hook, now: o.Now}
	for q, s := range o.Sources {
		l.sources[q] = s
	}
	if l.holder == "" {
		l.holder = catalog.LeaseHolder()
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	if l.metrics == nil {
		l.metrics = noMetrics{}
	}
	if l.now == nil {
		l.now = time.Now
	}
	return l, nil
}

// noMetrics is the Metrics of a loop without any.
type noMetrics struct{}

func (noMetrics) Init(...string)              {}
func (noMetrics) Drained(string, int)         {}
func (noMetrics) Succeeded(string, time.Time) {}
func (noMetrics) Failed(string)               {}
func (noMetrics) LeaseHeld(string, bool)      {}

// Holder returns the name this replica holds its leases under.
func (l *Loop) Holder() string { return l.holder }

// Queues returns the names of the queues drained, sorted.
func (l *Loop) Queues() []string {
	qs := make([]string, 0, len(l.sources))
	for q := range l.sources {
		qs = append(qs, q)
	}
	sort.Strings(qs)
	return qs
}

// Run drains until ctx ends, then releases the leases it holds and
// returns.
func (l *Loop) Run(ctx context.Context) {
	l.metrics.Init(l.Queues()...)
	var wg sync.WaitGroup
	for _, q := range l.Queues() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.queueLoop(ctx, q)
		}()
	}
	wg.Wait()
}

func (l *Loop) queueLoop(ctx context.Context, queue string) {
	t := time.NewTicker(l.interval)
	defer t.Stop()
	st := &queueState{lease: leaseUnknown}
	for {
		l.pass(ctx, queue, st)
		select {
		case <-ctx.Done():
			// Release whatever the last pass saw: a pass cut short by
			// the stop may not know it still held the lease (releasing
			// a lease of another holder does nothing).
			l.release(ctx, queue)
			return
		case <-t.C:
		}
	}
}

// leaseState is what a queue's loop knows of its lease.
type leaseState int

const (
	leaseUnknown leaseState = iota // before the first pass
	leaseHeld
	leaseOther // held by another replica, or not taken (catalog error)
)

// queueState is what a queue's loop carries from one pass to the next.
type queueState struct {
	lease   leaseState
	lastErr string // the last pass's error, "" when it succeeded
}

// failed logs a pass's failure: a warning when it differs from the
// previous pass's, else at debug level (a broker down is said once per
// change, not every interval).
func (l *Loop) failed(st *queueState, msg string, err error, args ...any) {
	args = append(args, "err", err)
	if err.Error() == st.lastErr {
		l.log.Debug(msg, args...)
		return
	}
	st.lastErr = err.Error()
	l.log.Warn(msg, args...)
}

// recovered logs the first good pass after failures.
func (l *Loop) recovered(st *queueState, queue string) {
	if st.lastErr != "" {
		l.log.Info("ingest: working again", "queue", queue, "after", st.lastErr)
		st.lastErr = ""
	}
}

// pass takes or renews queue's lease and, holding it, drains the queue's
// broker DLQ to the end; st carries what the previous pass left.
func (l *Loop) pass(ctx context.Context, queue string, st *queueState) {
	lease := LeasePrefix + queue
	ok, err := l.cat.TakeLease(ctx, lease, l.holder, l.ttl, l.now())
	if err != nil {
		if ctx.Err() != nil {
			return // stopping
		}
		l.metrics.Failed(queue)
		l.failed(st, "ingest: take the lease", err, "queue", queue, "lease", lease)
		ok = false
	}
	prev := st.lease
	st.lease = stateOf(ok)
	if st.lease != prev {
		l.metrics.LeaseHeld(queue, ok)
		if ok {
			l.log.Info("ingest: lease taken: this replica drains the queue's broker DLQ", "queue", queue, "lease", lease, "holder", l.holder, "ttl", l.ttl)
		} else if err == nil {
			l.log.Info("ingest: lease held by another replica: it drains the queue", "queue", queue, "lease", lease)
		}
	}
	if !ok {
		if err == nil {
			l.recovered(st, queue)
		}
		return
	}
	var added, brokerMade int
	src := l.sources[queue]
	p := catalog.IngestParams{Queue: queue, Batch: batch, Lease: lease, Holder: l.holder, TTL: l.ttl, Now: l.now,
		Foreign: src.Foreign, Reason: src.Reason,
		OnEntry: func(e *catalog.Entry, isNew, byBroker bool) {
			if !isNew {
				return
			}
			added++
			if byBroker {
				brokerMade++
				if l.hook != nil {
					l.hook.BrokerDeadLettered(queue, e.Reason)
				}
			}
		}}
	n, err := l.cat.IngestWith(ctx, src.Drainer, p)
	if n > 0 {
		l.metrics.Drained(queue, n)
		l.log.Info("ingest: drained dead letters into the catalog", "queue", queue, "drained", n, "added", added, "broker_made", brokerMade)
	}
	switch {
	case err == nil:
		l.metrics.Succeeded(queue, l.now())
		l.recovered(st, queue)
	case ctx.Err() != nil:
		// stopping: the batch in flight stays in the broker
	case errors.Is(err, catalog.ErrLeaseLost):
		st.lease = leaseOther
		l.metrics.LeaseHeld(queue, false)
		l.log.Warn("ingest: lease lost mid-drain: another replica took it over; the uncommitted batch stays in the broker", "queue", queue, "lease", lease, "err", err)
	default:
		l.metrics.Failed(queue)
		l.failed(st, "ingest: drain the broker DLQ (the dead letters stay in the broker; retried every interval)", err, "queue", queue, "drained", n)
	}
}

func stateOf(held bool) leaseState {
	if held {
		return leaseHeld
	}
	return leaseOther
}

// release gives up queue's lease as the server stops, so that another
// replica takes over at its next pass instead of after the lease's TTL.
func (l *Loop) release(ctx context.Context, queue string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	lease := LeasePrefix + queue
	held, err := l.cat.ReleaseLease(ctx, lease, l.holder)
	if err != nil {
		l.log.Warn("ingest: release the lease (another replica takes over when it expires)", "queue", queue, "lease", lease, "err", err)
		return
	}
	l.metrics.LeaseHeld(queue, false)
	if held {
		l.log.Info("ingest: lease released", "queue", queue, "lease", lease)
	}
}

// String describes the loop in one line: "ingesting the broker DLQs of 2
// queue(s) every 5s (lease ingest/<queue>, ttl 30s, holder web-1/...)".
func (l *Loop) String() string {
	return fmt.Sprintf("ingesting the broker DLQs of %d queue(s) every %s (lease %s<queue>, ttl %s, holder %s)",
		len(l.sources), l.interval, LeasePrefix, l.ttl, l.holder)
}
