// Package redrive sends dead letters back from the catalog to a queue, and
// records every such decision: a redrive selected by a filter (Redrive,
// with a rate, a batch size, max_redrives and a crasher guard, or
// redirected to another queue), a redrive job that outlives the process
// running it (CreateJob, RunJob, RunJobs: a sample sent first and watched,
// then the rest, resumed by another runner after a crash), and the
// in-order release of the messages parked behind a held key of an ordered
// queue (Keys, the runtime's lily.KeyStore; Unpark).
//
// A Redriver and Keys are built on a *catalog.Store. They read the store's
// entries and change their state with an audit record in the store's
// transactions (catalogdb), and own the tables lily_redrive_jobs and
// lily_held_keys. A redrive through a transport whose queues are in the
// catalog's own SQLite database (transport.TxPublisher) publishes and
// marks in one transaction. Package rules fires redrive jobs when their
// triggers occur.
package redrive

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
)

// DefaultMaxRedrives is max_redrives' default: an entry whose message was
// redriven this many times is not sent again but marked needs_manual.
const DefaultMaxRedrives = 2

// Publisher is the part of a transport a redrive needs (every
// transport.Transport is one).
type Publisher interface {
	Publish(ctx context.Context, p *transport.PublishParams) error
}

// Redriver redrives the entries of one catalog store and runs its redrive
// jobs. It is safe for concurrent use.
type Redriver struct {
	store *catalog.Store
	db    *catalogdb.DB
	// ledger proves a job's sample on a broker by its ack events.
	ledger *ledger.Ledger
	// waitN takes n tokens from a rate limit's bucket, waiting for them
	// (nil: lim.WaitN); a test sets it to see what each batch asked of
	// the bucket without timing it.
	waitN func(ctx context.Context, lim *rate.Limiter, n int) error
	// TracerProvider, when set, traces every redriven message with a
	// producer span in the message's own trace (its traceparent becomes
	// the span's), linked to the operator's or job's span in the context.
	// Set it before the first redrive. Nil: no spans.
	TracerProvider trace.TracerProvider
}

// New returns the redriver of store.
func New(store *catalog.Store) *Redriver {
	return &Redriver{store: store, db: catalogdb.Of(store), ledger: ledger.New(store)}
}

// selection is f's SQL on rd's store (catalogdb.Select).
func (rd *Redriver) selection(f catalog.Filter) catalogdb.Selection {
	return catalogdb.Select(f, rd.db.Dialect())
}

// ref returns e's reference.
func ref(e *catalog.Entry) catalog.EntryRef {
	return catalog.EntryRef{ID: e.ID, Queue: e.Queue, EventID: e.EventID, State: e.State, RedriveCount: e.RedriveCount, DeadLetteredAt: e.DeadLetteredAt}
}

// decision is a redrive's decision (catalogdb.Decision) with the audit
// action of the redrives it makes.
type decision struct {
	catalogdb.Decision
	// redriveAs is that action: catalog.ActionRedrive when empty,
	// ActionUnpark for an unpark's head.
	redriveAs string
}

// newDecision is catalogdb.NewDecision for a redrive.
func newDecision(op, actor, selector string, now func() time.Time) decision {
	return decision{Decision: catalogdb.NewDecision(op, actor, selector, now)}
}

// redriveAction is the audit action of d's redrives.
func (d decision) redriveAction() string {
	if d.redriveAs != "" {
		return d.redriveAs
	}
	return catalog.ActionRedrive
}
