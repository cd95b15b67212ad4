package transporttest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// The operator paths of redrive jobs (docs/design.md §9.4): a sample sent
// first and watched, a cancel, a runner that dies mid-job.

// jobBatch is the batch size of the job scenarios: 15 entries make three
// batches, so that a job can be stopped between them.
const jobBatch = 5

// createJob stores a job on the scenario's queue, held by holder.
func (e *opEnv) createJob(spec redrive.JobSpec, holder string) *redrive.Job {
	e.t.Helper()
	spec.Filter, spec.Actor, spec.Holder, spec.Lease = catalog.Filter{Queue: e.qc.Name}, "transporttest", holder, time.Minute
	j, err := e.rd.CreateJob(e.ctx, spec)
	if err != nil {
		e.t.Fatalf("create job: %v", err)
	}
	return j
}

// auditedRedrives counts, per event ID, the entries the job's operation
// recorded as redriven in the audit log.
func (e *opEnv) auditedRedrives(op string) map[string]int {
	e.t.Helper()
	out := map[string]int{}
	if err := e.cat.EachAudit(e.ctx, catalog.AuditFilter{Op: op}, func(r *catalog.AuditRecord) error {
		if r.Action == catalog.ActionRedrive && r.Outcome == catalog.OutcomeRedriven && !r.DryRun {
			for _, id := range r.EventIDs {
				out[id]++
			}
		}
		return nil
	}); err != nil {
		e.t.Fatalf("audit of %s: %v", op, err)
	}
	return out
}

// opSampleClean runs a job with a sample of 3 while the fixed consumer
// runs: the sample is sent alone, proved acked (by the ledger's ack
// events on a broker, by the queue itself on SQLite) before anything else
// is sent, and then the rest goes.
func opSampleClean(t *testing.T, e *opEnv) {
	const n, sample = 10, 3
	ids := e.deadLetterAll(n)
	e.fixed.Store(true)
	stop := e.consuming()
	j := e.createJob(redrive.JobSpec{Sample: sample, Observe: waitLimit}, "runner-a")
	var stages []string
	var atRest map[string]int // what was acked when the rest started
	out, err := e.rd.RunJob(e.ctx, j, redrive.JobRunParams{Holder: "runner-a", Target: e.target, Tick: e.tick, Poll: 20 * time.Millisecond,
		OnStage: func(stage string, _ []string) {
			stages = append(stages, stage)
			if stage == redrive.StageRest {
				e.mu.Lock()
				atRest = maps.Clone(e.acked[e.qc.Name])
				e.mu.Unlock()
			}
		}})
	if err != nil || out.State != redrive.JobDone || !out.SampleClean || len(out.Sampled) != sample || out.Sent != n {
		t.Fatalf("job: %+v (%v), want done, its sample of %d clean, %d sent", out, err, sample, n)
	}
	if want := []string{redrive.StageSample, redrive.StageObserve, redrive.StageRest}; !slices.Equal(stages, want) {
		t.Errorf("stages %v, want %v", stages, want)
	}
	// The sample went alone: when the rest started, no other message had
	// been acked. (The runtime's ack events may come after the ledger's or
	// the queue's proof, so the sampled ones need not all show yet.)
	sampled := map[string]bool{}
	var keys []string
	for _, m := range out.Sampled {
		sampled[m.EventID] = true
		keys = append(keys, m.LedgerKey)
	}
	for id := range atRest {
		if !sampled[id] {
			t.Errorf("%s was acked before the sample was proved, but it is not in the sample %v", id, out.Sampled)
		}
	}
	if _, inspects := e.tr.(transport.QueueInspector); !inspects {
		// The ledger proved the sample: its ack events name the sampled
		// messages.
		got, err := ledger.New(e.cat).AckedSince(e.ctx, e.qc.Name, j.CreatedAt.Add(-time.Second), keys)
		if err != nil || got != sample {
			t.Errorf("the ledger shows %d of the sample acked since the job started (%v), want %d", got, err, sample)
		}
	}
	e.waitAcked(e.qc.Name, n)
	stop()
	e.redrivenOnce(e.qc.Name, ids)
	e.conserve(ledger.Row{Queue: e.qc.Name, Accepted: n, Acked: n})
}

// opSampleStopped runs a job with a sample of 2 while the consumer still
// fails: the sample is dead-lettered again, the job stops, and the rest
// stays pending, never sent.
func opSampleStopped(t *testing.T, e *opEnv) {
	const n, sample = 8, 2
	e.deadLetterAll(n)
	stop := e.consuming()
	j := e.createJob(redrive.JobSpec{Sample: sample, Observe: waitLimit}, "runner-a")
	out, err := e.rd.RunJob(e.ctx, j, redrive.JobRunParams{Holder: "runner-a", Target: e.target, Tick: e.tick, Poll: 20 * time.Millisecond})
	var se *redrive.SampleError
	// The watch stops at the first sampled message back.
	if !errors.As(err, &se) || out.State != redrive.JobStopped || out.Sent != sample || len(out.Returned) == 0 {
		t.Fatalf("job: %+v (%v), want stopped by its sample of %d dead-lettered again", out, err, sample)
	}
	WaitWithin(t, waitLimit, "the sample dead-lettered again", func() (bool, string) {
		e.mu.Lock()
		defer e.mu.Unlock()
		again := 0
		for _, m := range out.Sampled {
			if e.dead[m.EventID] == 2 {
				again++
			}
		}
		return again == sample, fmt.Sprintf("%d of %d", again, sample)
	})
	stop()
	e.ingest(e.qc.Name, n+sample)
	// Each sampled message: its first entry redriven, a new one pending;
	// the rest pending, never sent.
	if st := e.states(e.qc.Name); st[catalog.StateRedriven] != sample || st[catalog.StatePending] != n || len(st) != 2 {
		t.Errorf("entry states %v, want %d redriven (the sample) and %d pending (the rest and the sample back)", st, sample, n)
	}
	if got := e.ackedOn(e.qc.Name); got != 0 {
		t.Errorf("%d acked, want none: the consumer still fails", got)
	}
	e.conserve(ledger.Row{Queue: e.qc.Name, Accepted: n, DeadLettered: n})
}

// opCancel cancels a running job after its first batch: it stops before
// the next, what was sent stays redriven (and is acked once), the rest
// stays pending; a second cancel says the job ended.
func opCancel(t *testing.T, e *opEnv) {
	const n = 15
	e.deadLetterAll(n)
	e.fixed.Store(true)
	stop := e.consuming()
	j := e.createJob(redrive.JobSpec{}, "runner-a")
	var once sync.Once
	out, err := e.rd.RunJob(e.ctx, j, redrive.JobRunParams{Holder: "runner-a", Target: e.target, Batch: jobBatch,
		Progress: func(p redrive.Progress) {
			if p.Done >= jobBatch {
				once.Do(func() {
					if _, err := e.rd.CancelJob(e.ctx, j.ID, "operator"); err != nil {
						t.Errorf("cancel: %v", err)
					}
				})
			}
		}})
	if !errors.Is(err, redrive.ErrJobCancelled) || out.State != redrive.JobCancelled || out.Sent != jobBatch {
		t.Fatalf("job: %+v (%v), want cancelled after %d sent", out, err, jobBatch)
	}
	if _, err := e.rd.CancelJob(e.ctx, j.ID, "operator"); !errors.Is(err, redrive.ErrJobEnded) {
		t.Errorf("second cancel: %v, want ErrJobEnded", err)
	}
	e.waitAcked(e.qc.Name, jobBatch)
	stop()
	if st := e.states(e.qc.Name); st[catalog.StateRedriven] != jobBatch || st[catalog.StatePending] != n-jobBatch {
		t.Errorf("entry states %v, want %d redriven and %d pending", st, jobBatch, n-jobBatch)
	}
	var sent []string
	for id, k := range e.auditedRedrives(j.Op) {
		if k != 1 {
			t.Errorf("%s audited as redriven %d times, want once", id, k)
		}
		sent = append(sent, id)
	}
	e.redrivenOnce(e.qc.Name, sent)
	e.conserve(ledger.Row{Queue: e.qc.Name, Accepted: n, Acked: jobBatch, DeadLettered: n - jobBatch})
}

// opRunnerDies kills a job's runner after its first batch (its context is
// cancelled at the batch's progress event, as a process killed there
// would stop) and lets another runner take the job over once the first
// one's lease would have run out: every entry is redriven exactly once —
// the audit names each once, the consumer acks each once — and the job
// ends done once, with nothing left to claim.
func opRunnerDies(t *testing.T, e *opEnv) {
	const n = 15
	ids := e.deadLetterAll(n)
	e.fixed.Store(true)
	stop := e.consuming()
	j := e.createJob(redrive.JobSpec{}, "runner-a")
	ctxA, kill := context.WithCancel(e.ctx)
	defer kill()
	outA, err := e.rd.RunJob(ctxA, j, redrive.JobRunParams{Holder: "runner-a", Target: e.target, Batch: jobBatch, Lease: time.Minute,
		Progress: func(p redrive.Progress) {
			if p.Done >= jobBatch {
				kill()
			}
		}})
	if err == nil || !outA.State.Active() || outA.Sent != jobBatch {
		t.Fatalf("runner A: %+v (%v), want it stopped mid-job with %d sent and the job still active", outA, err, jobBatch)
	}
	// Runner B comes by after runner A's lease would have run out.
	jb, err := e.rd.ClaimJob(e.ctx, "runner-b", time.Minute, time.Now().Add(2*time.Minute))
	if err != nil || jb == nil || jb.ID != j.ID {
		t.Fatalf("runner B's claim: %+v (%v), want job %d", jb, err, j.ID)
	}
	outB, err := e.rd.RunJob(e.ctx, jb, redrive.JobRunParams{Holder: "runner-b", Target: e.target, Batch: jobBatch})
	if err != nil || outB.State != redrive.JobDone || outB.Sent != n || outB.Total != n {
		t.Fatalf("runner B: %+v (%v), want the job done with %d sent", outB, err, n)
	}
	if again, err := e.rd.ClaimJob(e.ctx, "runner-c", time.Minute, time.Now().Add(4*time.Minute)); err != nil || again != nil {
		t.Errorf("a third runner claimed %+v (%v), want nothing: the job is done", again, err)
	}
	audited := e.auditedRedrives(j.Op)
	for _, id := range ids {
		if audited[id] != 1 {
			t.Errorf("%s audited as redriven %d times, want once", id, audited[id])
		}
	}
	if len(audited) != n {
		t.Errorf("the audit names %d redriven messages, want %d", len(audited), n)
	}
	e.waitAcked(e.qc.Name, n)
	stop()
	e.redrivenOnce(e.qc.Name, ids)
	e.conserve(ledger.Row{Queue: e.qc.Name, Accepted: n, Acked: n})
}
