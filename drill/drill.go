// Package drill rehearses a queue's dead-letter path on a real environment
// ('lily drill', docs/design.md §9.11): it publishes one synthetic poison
// message marked as a drill and checks, one step at a time and each with
// its time, that the message is dead-lettered with its reason, reaches the
// catalog, fires the alert, is shown by the console and 'lily dlq show',
// and is redriven and acked by the consumers' drill path (or discarded
// with a record) — and that the ledger accounts for it.
//
// The package takes the environment from its caller (the transport that
// publishes into the queue, the catalog, the redrive targets): it opens no
// broker itself, and the CLI only wires flags and prints the Report.
package drill

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// The steps of a drill, in the order they run (Step.Name).
const (
	StepPublish      = "publish"       // the drill message is published to the queue
	StepDeadLettered = "dead_lettered" // a consumer dead-lettered it, with its reason
	StepCatalog      = "catalog"       // its dead letter is an entry of the catalog
	StepAlert        = "alert"         // the queue's alert fires (Prometheus or Alertmanager)
	StepConsole      = "console"       // the console's API (lily serve) shows the reason
	StepDLQShow      = "dlq_show"      // 'lily dlq show' shows the reason
	StepRedrive      = "redrive"       // the redriven drill message is acked by the drill path
	StepDiscard      = "discard"       // (Finish "discard") the entry is discarded with a record
	StepLedger       = "ledger"        // nothing left behind; the queue's ledger balances
)

// The status of a step (Step.Status).
const (
	Passed     = "passed"
	Failed     = "failed"
	NotChecked = "not_checked" // nothing configured to check it, or an earlier step failed
)

// Finish modes: what becomes of the drill's dead letter (Options.Finish).
const (
	FinishRedrive = "redrive" // redrive it; the consumers' drill path acks it
	FinishDiscard = "discard" // discard it with a record (consumers without the drill path)
)

// DefaultAlert is the alert a drill waits for: it fires on the first held
// dead letter of a queue ('lily alerts' with --dlq-floor 0).
const DefaultAlert = "LilyDLQNotEmpty"

// ExpectedReason is the dead-letter reason of a drill message: its
// x-retry-count is not canonical, so every Lily consumer dead-letters it
// before any handler runs (docs/design.md §4.2, step 1).
const ExpectedReason = "invalid_retry_count"

// Step is one checked step of a drill. The JSON form is a contract
// (docs/drill.md): scripts in CI read it.
type Step struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	// DurationMillis is the step's time: from the publish to the event the
	// step awaited (dead_lettered, catalog, alert), or how long the step's
	// own work took (console, dlq_show, redrive, discard, ledger).
	DurationMillis int64  `json:"duration_ms"`
	Detail         string `json:"detail"`
}

// Report is the outcome of a drill.
type Report struct {
	Drill     string `json:"drill"` // the drill's ID: the value of x-lily-drill
	Queue     string `json:"queue"`
	Transport string `json:"transport"`
	EventID   string `json:"event_id"`
	// EntryID is the drill message's catalog entry (0: it never got there).
	EntryID int64 `json:"entry_id,omitempty"`
	// Passed: no step failed (steps not checked do not fail a drill, and
	// are listed as such).
	Passed bool   `json:"passed"`
	Steps  []Step `json:"steps"`
	// LeftBehind says what the drill could not clean up, and how to.
	LeftBehind string `json:"left_behind,omitempty"`
	// Runbook is a runbook skeleton for the queue, with its real names.
	Runbook string `json:"runbook"`
}

// Env is the environment a drill runs against, wired by the caller.
type Env struct {
	// Queue is the drilled queue's configuration.
	Queue lily.QueueConfig
	// Publisher publishes into Queue (the transport its consumers read).
	Publisher transport.Transport
	// Catalog is the catalog the queue's dead letters reach; Ledger is its
	// ledger.
	Catalog *catalog.Store
	Ledger  *ledger.Ledger
	// InFlight counts what the queue's transport still holds, for the
	// ledger's balance; nil: the ledger step reports it cannot count.
	InFlight transport.InFlightCounter
	// Target and Tick are the redrive's publisher per queue and its look
	// at the broker's DLQ (redrive.JobRunParams).
	Target func(ctx context.Context, queue string) (redrive.Publisher, error)
	Tick   func(ctx context.Context, queues []string) error
	// Show renders a catalog entry as 'lily dlq show ID' prints it; nil:
	// the dlq_show step is not checked.
	Show func(ctx context.Context, entryID int64) (string, error)
	// Names are the queue's real names, for the runbook.
	Names Names
}

// Options are the settings of a drill.
type Options struct {
	// Prometheus and Alertmanager are base URLs asked for the alert; with
	// neither, the alert step is not checked (and says so).
	Prometheus   string
	Alertmanager string
	// Alert is the alert name to wait for (default DefaultAlert).
	Alert string
	// Console is the base URL of 'lily serve' (its API and console); Token
	// its API token, if it has tokens. Empty: the console step is not checked.
	Console string
	Token   string
	// Finish is FinishRedrive (default) or FinishDiscard.
	Finish string
	// AllowOrdered lets a drill run on a queue with ordering park or block.
	AllowOrdered bool
	// Timeout bounds each awaited step but the alert and the redrive's ack
	// (default 1m); AlertTimeout the alert (default 5m: a scrape, a rule
	// evaluation, its for:); AckTimeout the redrive's ack (default 1m).
	Timeout, AlertTimeout, AckTimeout time.Duration
	// Poll is the pause between looks (default 200ms).
	Poll time.Duration
	// Actor is who decides the redrive or discard (the audit's actor).
	Actor string
	// Client asks Prometheus, Alertmanager and the console (default: a
	// client with a 10s timeout).
	Client *http.Client
	// Now returns the current time (default time.Now).
	Now func() time.Time
}

// ErrOrdered refuses a drill of a queue with ordering park or block.
var ErrOrdered = errors.New("drill: ordered queue")

// OrderedError is the refusal of a drill on an ordered queue: the drill's
// dead letter would hold a key, so it needs AllowOrdered.
type OrderedError struct {
	Queue, Ordering string
}

func (e *OrderedError) Error() string {
	return fmt.Sprintf("queue %s has ordering = %q: a drill's dead letter holds its key like any head (later messages of the key wait; with block, "+
		"until the drill's entry is redriven or discarded), so it is refused; run it with --allow-ordered to accept that, or drill an unordered queue",
		e.Queue, e.Ordering)
}

// Unwrap makes errors.Is(err, ErrOrdered) hold.
func (e *OrderedError) Unwrap() error { return ErrOrdered }

func (o *Options) defaults() error {
	if o.Alert == "" {
		o.Alert = DefaultAlert
	}
	if o.Finish == "" {
		o.Finish = FinishRedrive
	}
	if o.Finish != FinishRedrive && o.Finish != FinishDiscard {
		return fmt.Errorf("drill: finish %q: must be %q (the consumers ack a redriven drill message) or %q (consumers that cannot recognise it)",
			o.Finish, FinishRedrive, FinishDiscard)
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Minute
	}
	if o.AlertTimeout <= 0 {
		o.AlertTimeout = 5 * time.Minute
	}
	if o.AckTimeout <= 0 {
		o.AckTimeout = time.Minute
	}
	if o.Poll <= 0 {
		o.Poll = 200 * time.Millisecond
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Actor == "" {
		o.Actor = catalog.DefaultActor()
	}
	return nil
}

// Check refuses what a drill must not run on: an ordered queue without
// AllowOrdered. Run calls it first; the CLI calls it before it connects.
func Check(q lily.QueueConfig, o Options) error {
	if (q.Ordering == lily.OrderingPark || q.Ordering == lily.OrderingBlock) && !o.AllowOrdered {
		return &OrderedError{Queue: q.Name, Ordering: q.Ordering}
	}
	return nil
}

// Run runs a drill on env's queue and reports every step. The error is for
// what stopped the drill before its steps (a refusal, bad options); a step
// that fails is in the Report (Passed false), not an error.
func Run(ctx context.Context, env Env, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if err := Check(env.Queue, o); err != nil {
		return nil, err
	}
	if env.Publisher == nil || env.Catalog == nil || env.Ledger == nil {
		return nil, errors.New("drill: the environment needs a publisher, a catalog and its ledger")
	}
	r := &run{env: env, o: o, rep: &Report{Queue: env.Queue.Name, Transport: string(env.Queue.Transport)}}
	r.rep.Runbook = Runbook(env.Queue, env.Names, o)
	r.steps(ctx)
	r.rep.Passed = true
	for _, s := range r.rep.Steps {
		if s.Status == Failed {
			r.rep.Passed = false
		}
	}
	return r.rep, nil
}
