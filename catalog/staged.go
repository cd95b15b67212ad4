package catalog

import (
	"context"
	"time"
)

// StagedRedriveParams are the arguments of RedriveStaged: a redrive that
// sends a sample first, watches it, and only then sends the rest.
type StagedRedriveParams struct {
	// RedriveParams select the entries and say how to send them. Limit
	// caps the whole selection, sample included; Rate paces the rest (the
	// sample is sent at once). OnEntry and Progress see both stages.
	RedriveParams
	// Sample is how many entries to redrive first; 0 means no sample (one
	// plain Redrive).
	Sample int
	// Observe is how long to watch the sample for dead letters; required
	// with a Sample.
	Observe time.Duration
	// Tick, if set, runs before each look while watching, with the queues
	// the sample went to: e.g. ingesting their broker DLQs.
	Tick func(ctx context.Context, queues []string) error
	// OnStage, if set, is called when a stage starts: StageSample,
	// StageObserve (with the sampled event IDs) or StageRest.
	OnStage func(stage string, sampled []string)
}

// Stages of a staged redrive, as OnStage reports them.
const (
	StageSample  = "sample"
	StageObserve = "observe"
	StageRest    = "rest"
)

// StagedRedriveResult is what RedriveStaged did.
type StagedRedriveResult struct {
	// Total adds up both stages (Total.Elapsed is the whole run).
	Total RedriveResult
	// Rest is the paced second stage (or the only one without a sample).
	Rest RedriveResult
	// Sampled are the event IDs the sample redrove.
	Sampled []string
	// SampleClean is set when the sample was watched and none came back.
	SampleClean bool
	// Stopped is set when sampled messages were dead-lettered again: the
	// rest was not sent. Returned are their new entries.
	Stopped  bool
	Returned []EntryRef
}

// RedriveStaged is the safe redrive of DESIGN §9 as 'lily dlq redrive
// --sample N --observe D --rate R' runs it: it redrives Sample entries,
// watches their event IDs for Observe (Observe), audits what it saw
// (RecordObservation) and, when none was dead-lettered again, redrives the
// rest of the selection at Rate. Every stage is audited under one Op. A
// sample whose entries were all at max_redrives sends nothing and ends the
// run (they become needs_manual; run again to sample the next entries).
// When the sample comes back, the error says which messages did and the
// rest stays pending.
func (s *Store) RedriveStaged(ctx context.Context, p StagedRedriveParams) (StagedRedriveResult, error) {
	var out StagedRedriveResult
	start := time.Now()
	if p.Op == "" {
		p.Op = NewOp(time.Now())
	}
	add := func(r RedriveResult) {
		out.Total.Op, out.Total.DryRun = r.Op, r.DryRun
		out.Total.Selected += r.Selected
		out.Total.Redriven += r.Redriven
		out.Total.NeedsManual += r.NeedsManual
	}
	defer func() { out.Total.Elapsed = time.Since(start) }()
	if p.Sample <= 0 || p.DryRun {
		stage(p, StageRest, nil)
		r, err := s.Redrive(ctx, p.RedriveParams)
		add(r)
		out.Rest = r
		return out, err
	}
	since, err := s.LastID(ctx)
	if err != nil {
		return out, err
	}
	var queues []string
	seen := map[string]bool{}
	sp := p.RedriveParams
	sp.Limit, sp.Rate = p.Sample, 0
	if p.Limit > 0 {
		sp.Limit = min(p.Sample, p.Limit)
	}
	sp.OnEntry = func(e EntryRef, outcome string) {
		if outcome == OutcomeRedriven {
			out.Sampled = append(out.Sampled, e.EventID)
			if !seen[e.Queue] {
				seen[e.Queue] = true
				queues = append(queues, e.Queue)
			}
		}
		if p.OnEntry != nil {
			p.OnEntry(e, outcome)
		}
	}
	stage(p, StageSample, nil)
	r, err := s.Redrive(ctx, sp)
	add(r)
	if err != nil || len(out.Sampled) == 0 {
		return out, err
	}
	stage(p, StageObserve, out.Sampled)
	op := ObserveParams{Since: since, EventIDs: out.Sampled, Window: p.Observe}
	if p.Tick != nil {
		op.Tick = func(ctx context.Context) error { return p.Tick(ctx, queues) }
	}
	back, err := s.Observe(ctx, op)
	if err != nil {
		return out, err
	}
	if err := s.RecordObservation(ctx, p.Op, p.Actor, out.Sampled, p.Observe, back); err != nil {
		out.Stopped, out.Returned = true, back
		return out, err
	}
	out.SampleClean = true
	if p.Limit > 0 && p.Limit <= r.Selected {
		return out, nil
	}
	rp := p.RedriveParams
	if p.Limit > 0 {
		rp.Limit = p.Limit - r.Selected
	}
	stage(p, StageRest, nil)
	r, err = s.Redrive(ctx, rp)
	add(r)
	out.Rest = r
	return out, err
}

func stage(p StagedRedriveParams, name string, sampled []string) {
	if p.OnStage != nil {
		p.OnStage(name, sampled)
	}
}
