// Package rules fires redrive rules ([[redrive_rule]], 'lily serve'): when
// a rule's trigger occurs — a circuit breaker of the queue closed after an
// outage, or a consumer version at least the fixing one acked messages of
// the queue — the entries it names are redriven as an ordinary redrive job
// (package redrive), once per occurrence however many serve replicas look.
// The triggers are written by the runtime through RuntimeRecorder, a
// lily.Hook.
//
// An Engine is built on a *catalog.Store and owns the tables
// lily_breaker_events, lily_consumer_versions and lily_rule_firings.
package rules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/redrive"
)

// Rule triggers (config.TriggerBreakerClosed, config.TriggerConsumerVersion).
const (
	TriggerBreakerClosed   = "breaker_closed"
	TriggerConsumerVersion = "consumer_version"
)

// Rule is a redrive rule ([[redrive_rule]]): which entries to redrive,
// as an ordinary redrive job, when its trigger occurs.
type Rule struct {
	Name, Queue, When string
	// Reason is the only dead-letter reason the rule redrives.
	Reason string
	// Fingerprint, if set, keeps only entries with it.
	Fingerprint string
	// MinConsumerVersion is the fixing version (TriggerConsumerVersion).
	MinConsumerVersion string
	// Lookback widens an outage's window before the breaker opened.
	Lookback time.Duration
	// MaxAge is how recent a trigger must be to fire.
	MaxAge time.Duration
	// Sample, Observe, Rate and Limit are the job's (redrive.JobSpec).
	Sample  int
	Observe time.Duration
	Rate    float64
	Limit   int
}

// Actor is the audit actor of the rule's decisions.
func (r Rule) Actor() string { return "rule:" + r.Name }

// Plan is what a rule would do for one occurrence of its trigger.
type Plan struct {
	Rule       string `json:"rule"`
	Queue      string `json:"queue"`
	Occurrence string `json:"occurrence"`
	// Trigger says what happened, for people.
	Trigger string `json:"trigger"`
	// Fired is set when the rule already fired for the occurrence (JobID
	// is its job, 0 when it selected nothing).
	Fired bool  `json:"fired"`
	JobID int64 `json:"job_id,omitempty"`
	// Filter is the selection of the redrive job.
	Filter catalog.Filter `json:"-"`
	// Selector is Filter as JSON.
	Selector string `json:"filter"`
	// Selected are the pending entries the job would handle now; HeldBack
	// the delivery_limit entries it leaves out.
	Selected int `json:"selected"`
	HeldBack int `json:"held_back"`

	// includeCrashers and crasherVersion are the job's IncludeCrashers
	// and NewConsumerVersion (redrive.Params).
	includeCrashers bool
	crasherVersion  string
}

// Engine plans and fires the redrive rules of one catalog store, and
// keeps the signals they trigger on. It is safe for concurrent use.
type Engine struct {
	db *catalogdb.DB
	rd *redrive.Redriver
}

// New returns the rules engine of store.
func New(store *catalog.Store) *Engine {
	return &Engine{db: catalogdb.Of(store), rd: redrive.New(store)}
}

// NoTrigger is the Occurrence of a plan that only reports that the
// rule's trigger has not occurred (within MaxAge).
const NoTrigger = ""

// Plan returns, for each rule, a plan per trigger occurrence within
// the rule's MaxAge: fired ones (Fired set) and those that would fire now,
// with what they would select. A rule whose trigger has not occurred gets
// one plan with an empty Occurrence. Nothing is changed or audited.
func (en *Engine) Plan(ctx context.Context, rules []Rule, now time.Time) ([]Plan, error) {
	fired := map[[2]string]int64{}
	fs, err := en.Firings(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, f := range fs {
		if f.State == "firing" && f.FiredAt.Before(now.Add(-firingStale)) {
			continue // its replica died: the rule fires again
		}
		fired[[2]string{f.Rule, f.Occurrence}] = f.JobID
	}
	var out []Plan
	for _, r := range rules {
		ps, err := en.ruleOccurrences(ctx, r, now)
		if err != nil {
			return nil, err
		}
		if len(ps) == 0 {
			out = append(out, Plan{Rule: r.Name, Queue: r.Queue, Trigger: noTrigger(r)})
			continue
		}
		for _, p := range ps {
			if job, ok := fired[[2]string{r.Name, p.Occurrence}]; ok {
				p.Fired, p.JobID = true, job
			} else if p.Selected, p.HeldBack, err = en.rd.Count(ctx, redrive.Params{Filter: p.Filter, Limit: r.Limit, IncludeCrashers: p.includeCrashers, NewConsumerVersion: p.crasherVersion}); err != nil {
				return nil, err
			}
			out = append(out, p)
		}
	}
	return out, nil
}

func noTrigger(r Rule) string {
	if r.When == TriggerConsumerVersion {
		return fmt.Sprintf("no consumer of version >= %s has acked messages of %s within %s", r.MinConsumerVersion, r.Queue, r.MaxAge)
	}
	return fmt.Sprintf("no breaker of %s closed after an outage within %s", r.Queue, r.MaxAge)
}

// ruleOccurrences lists the occurrences of r's trigger within its MaxAge,
// each with the selection it redrives.
func (en *Engine) ruleOccurrences(ctx context.Context, r Rule, now time.Time) ([]Plan, error) {
	base := catalog.Filter{Queue: r.Queue, Reason: r.Reason, Fingerprint: r.Fingerprint, States: []catalog.State{catalog.StatePending}}
	include, version := false, ""
	if r.Reason == "delivery_limit" {
		include = true // named explicitly by the rule
	}
	since := now.Add(-r.MaxAge)
	switch r.When {
	case TriggerBreakerClosed:
		os, err := en.Outages(ctx, r.Queue, since)
		if err != nil {
			return nil, err
		}
		var out []Plan
		for _, o := range os {
			f := base
			f.DeadLetteredAfter = o.OpenedAt.Add(-r.Lookback)
			f.DeadLetteredBefore = o.Closed.At.Add(time.Millisecond)
			out = append(out, Plan{Rule: r.Name, Queue: r.Queue, Occurrence: fmt.Sprintf("breaker:%d", o.Closed.ID), Filter: f, Selector: f.String(), includeCrashers: include,
				Trigger: fmt.Sprintf("breaker of %s (consumer %s) opened %s, closed %s", r.Queue, o.Closed.Consumer,
					o.OpenedAt.Format(time.RFC3339), o.Closed.At.Format(time.RFC3339))})
		}
		return out, nil
	case TriggerConsumerVersion:
		vs, err := en.AckedVersions(ctx, r.Queue)
		if err != nil {
			return nil, err
		}
		for _, v := range vs { // oldest first acked first
			if CompareVersions(v.Version, r.MinConsumerVersion) < 0 || v.FirstAckedAt.Before(since) {
				continue
			}
			f := base
			// What the fixed version dead-lettered itself is not its
			// predecessors' failure: only what came before it ran.
			f.DeadLetteredBefore = v.FirstAckedAt
			if r.Reason == "delivery_limit" {
				include, version = false, v.Version
			}
			return []Plan{{Rule: r.Name, Queue: r.Queue, Occurrence: "consumer_version>=" + r.MinConsumerVersion, Filter: f, Selector: f.String(),
				includeCrashers: include, crasherVersion: version,
				Trigger: fmt.Sprintf("consumer version %s (>= %s) acked messages of %s since %s", v.Version, r.MinConsumerVersion, r.Queue,
					v.FirstAckedAt.Format(time.RFC3339))}}, nil
		}
		return nil, nil
	}
	return nil, fmt.Errorf("catalog: rule %s: unknown trigger %q (want %s or %s)", r.Name, r.When, TriggerBreakerClosed, TriggerConsumerVersion)
}

// FireParams are the arguments of Fire.
type FireParams struct {
	Rules []Rule
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// Logger receives what fired. Defaults to slog.Default().
	Logger *slog.Logger
	// TracerProvider, when set, makes each firing a span "rule <name>" in
	// ctx, with the rule, the occurrence, the trigger, the operation and
	// the job it created (lily.redrive.job_id). Nil: no spans.
	TracerProvider trace.TracerProvider
}

// Fire fires every rule whose trigger occurred and has not fired for
// that occurrence: the firing is claimed in the catalog (once per rule and
// occurrence, whichever replica claims it first), the redrive is dry-run
// and audited under the job's operation, then the job is created as any
// other redrive job, queued for the job runner ('lily dlq jobs'; it runs
// with its sample, rate and max_redrives). A queue that has an active job makes the firing
// wait for a later call. It returns the plans that fired.
func (en *Engine) Fire(ctx context.Context, p FireParams) ([]Plan, error) {
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	logger := p.Logger
	if logger == nil {
		logger = slog.Default()
	}
	plans, err := en.Plan(ctx, p.Rules, now())
	if err != nil {
		return nil, err
	}
	byName := map[string]Rule{}
	for _, r := range p.Rules {
		byName[r.Name] = r
	}
	var fired []Plan
	var errs []error
	for _, pl := range plans {
		if pl.Fired || pl.Occurrence == NoTrigger {
			continue
		}
		r := byName[pl.Rule]
		ok, err := en.fireRule(ctx, r, &pl, now, p.TracerProvider)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %s (%s): %w", r.Name, pl.Occurrence, err))
			continue
		}
		if ok {
			logger.Info("catalog: redrive rule fired", "rule", r.Name, "queue", r.Queue, "trigger", pl.Trigger, "selected", pl.Selected, "job", pl.JobID)
			fired = append(fired, pl)
		}
	}
	return fired, errors.Join(errs...)
}

// fireRule fires one plan; false when another replica fired it, or the
// queue is busy (the firing is released to be tried again).
func (en *Engine) fireRule(ctx context.Context, r Rule, pl *Plan, now func() time.Time, tp trace.TracerProvider) (bool, error) {
	op := catalog.NewOp(now())
	claimed, err := en.ClaimFiring(ctx, Firing{Rule: r.Name, Occurrence: pl.Occurrence, Queue: r.Queue, FiredAt: now(), Op: op, Detail: pl.Trigger})
	if err != nil || !claimed {
		return false, err
	}
	// Only the replica that claimed the firing makes its span.
	ctx, end := traceFiring(ctx, tp, r, pl, op)
	fired, err := en.fireClaimed(ctx, r, pl, now, op)
	end(fired, err)
	return fired, err
}

// fireClaimed fires a plan whose firing this call claimed.
func (en *Engine) fireClaimed(ctx context.Context, r Rule, pl *Plan, now func() time.Time, op string) (bool, error) {
	release := func(err error) (bool, error) {
		if rerr := en.ReleaseFiring(context.WithoutCancel(ctx), r.Name, pl.Occurrence); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return false, err
	}
	// An active job holds the queue: wait for it, without a record.
	if j, err := en.rd.ActiveJob(ctx, r.Queue); err != nil || j != nil {
		return release(err)
	}
	opts := fmt.Sprintf(`"rule":%q,"occurrence":%q,"trigger":%q`, r.Name, pl.Occurrence, pl.Trigger)
	rp := redrive.Params{Filter: pl.Filter, Limit: r.Limit, DryRun: true, Rate: r.Rate, Actor: r.Actor(), Op: op, Options: opts,
		IncludeCrashers: pl.includeCrashers, NewConsumerVersion: pl.crasherVersion, Now: now}
	plan, err := en.rd.Redrive(ctx, rp)
	if err != nil {
		return release(err)
	}
	if plan.Selected == 0 {
		pl.Selected = 0
		return true, en.CompleteFiring(ctx, r.Name, pl.Occurrence, 0, pl.Trigger+"; nothing to redrive (dry run "+op+")")
	}
	j, err := en.rd.CreateJob(ctx, redrive.JobSpec{Filter: pl.Filter, Limit: r.Limit, Rate: r.Rate, Sample: r.Sample, Observe: r.Observe,
		NewConsumerVersion: pl.crasherVersion, IncludeCrashers: pl.includeCrashers, Actor: r.Actor(), Op: op, Now: now})
	var conflict *redrive.JobConflictError
	if errors.As(err, &conflict) {
		return release(nil)
	}
	if err != nil {
		return release(err)
	}
	pl.JobID = j.ID
	return true, en.CompleteFiring(ctx, r.Name, pl.Occurrence, j.ID, fmt.Sprintf("%s; job %d: %d entries (dry run %s)", pl.Trigger, j.ID, j.Total, op))
}
