package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lilyprom"
	"github.com/lily-mq/lily/transport"
)

// Defaults of the continuous ingest of 'lily serve'.
const (
	defaultIngestInterval = 5 * time.Second
	defaultIngestLeaseTTL = 30 * time.Second
	// ingestLeasePrefix names the ingest leases: "ingest/<queue>".
	ingestLeasePrefix = "ingest/"
	// ingestBatch is the most dead letters committed in one transaction;
	// each batch renews the lease.
	ingestBatch = 256
)

// ingestOptions are the flags of the continuous ingest.
type ingestOptions struct {
	off      bool          // --no-ingest
	interval time.Duration // --ingest-interval
	leaseTTL time.Duration // --ingest-lease-ttl
}

func (o ingestOptions) validate() error {
	if o.off {
		return nil
	}
	switch {
	case o.interval < 10*time.Millisecond:
		return usagef("--ingest-interval %s: must be at least 10ms (default %s)", o.interval, defaultIngestInterval)
	case o.leaseTTL < 2*o.interval:
		return usagef("--ingest-lease-ttl %s: must be at least twice --ingest-interval %s, so that the holder renews its lease before it runs out (default %s)",
			o.leaseTTL, o.interval, defaultIngestLeaseTTL)
	}
	return nil
}

// ingestLoop drains the broker DLQ of every configured broker queue into
// the catalog, continuously: one goroutine per queue passes every
// interval. A pass first takes (or renews) the queue's lease in the
// catalog, "ingest/<queue>", so that of several 'lily serve' replicas on
// one catalog exactly one drains each queue at a time; every batch it
// commits renews the lease in the batch's own transaction (a replica that
// lost its lease commits nothing). A replica that stops releases its
// leases; one that dies hands over when its leases expire (leaseTTL).
type ingestLoop struct {
	cat     *catalog.Store
	sources map[string]transport.DeadLetterDrainer
	// foreign are the sources that are [[foreign_dlq]] queues: ingested
	// with their kind (the ledger counts them accepted) and reason.
	foreign  map[string]config.ForeignDLQConfig
	holder   string
	interval time.Duration
	ttl      time.Duration
	log      *slog.Logger
	metrics  *lilyprom.IngestMetrics
	hook     *lilyprom.Hook // counts broker-made dead letters in the inflow; may be nil
	now      func() time.Time
}

// queues returns the queue names, sorted.
func (l *ingestLoop) queues() []string {
	qs := make([]string, 0, len(l.sources))
	for q := range l.sources {
		qs = append(qs, q)
	}
	sort.Strings(qs)
	return qs
}

// run drains until ctx ends, then releases the leases it holds.
func (l *ingestLoop) run(ctx context.Context) {
	if l.now == nil {
		l.now = time.Now
	}
	l.metrics.Init(l.queues()...)
	var wg sync.WaitGroup
	for _, q := range l.queues() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.queueLoop(ctx, q)
		}()
	}
	wg.Wait()
}

func (l *ingestLoop) queueLoop(ctx context.Context, queue string) {
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
func (l *ingestLoop) failed(st *queueState, msg string, err error, args ...any) {
	args = append(args, "err", err)
	if err.Error() == st.lastErr {
		l.log.Debug(msg, args...)
		return
	}
	st.lastErr = err.Error()
	l.log.Warn(msg, args...)
}

// recovered logs the first good pass after failures.
func (l *ingestLoop) recovered(st *queueState, queue string) {
	if st.lastErr != "" {
		l.log.Info("ingest: working again", "queue", queue, "after", st.lastErr)
		st.lastErr = ""
	}
}

// pass takes or renews queue's lease and, holding it, drains the queue's
// broker DLQ to the end; st carries what the previous pass left.
func (l *ingestLoop) pass(ctx context.Context, queue string, st *queueState) {
	lease := ingestLeasePrefix + queue
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
	p := catalog.IngestParams{Queue: queue, Batch: ingestBatch, Lease: lease, Holder: l.holder, TTL: l.ttl, Now: l.now,
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
	if f, ok := l.foreign[queue]; ok {
		p.Foreign, p.Reason = f.Kind, f.Reason()
	}
	n, err := l.cat.IngestWith(ctx, l.sources[queue], p)
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
func (l *ingestLoop) release(ctx context.Context, queue string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	lease := ingestLeasePrefix + queue
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

// describe is the line 'lily serve' prints about the ingest.
func (l *ingestLoop) describe() string {
	return fmt.Sprintf("lily serve: ingesting the broker DLQs of %d queue(s) every %s (lease %s<queue>, ttl %s, holder %s)",
		len(l.sources), l.interval, ingestLeasePrefix, l.ttl, l.holder)
}
