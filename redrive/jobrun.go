package redrive

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/ledger"
)

// jobRun ties a Redrive to the stored job a runner holds: before each batch
// it renews the lease (and notices a cancellation or a takeover), and in
// each batch's transaction it records the job's progress.
type jobRun struct {
	rd     *Redriver
	job    *Job
	holder string
	lease  time.Duration
	now    func() time.Time
	// sampling is set while the sample is sent: its messages are recorded.
	sampling bool
	// cursor is the job's cursor once the current sub-batch is done (set
	// by Redrive before each).
	cursor int64
}

// check renews the lease through q; it fails, wrapping ErrJobCancelled or
// ErrJobLeaseLost, when the job is no longer this runner's to run.
func (r *jobRun) check(ctx context.Context, q catalogdb.Querier) error {
	now := r.now().UnixMilli()
	res, err := q.ExecContext(ctx, `UPDATE lily_redrive_jobs SET lease_until = ?, updated_at = ?
		WHERE id = ? AND holder = ? AND state IN ('running', 'sampling')`, now+r.lease.Milliseconds(), now, r.job.ID, r.holder)
	if err != nil {
		return fmt.Errorf("catalog: renew the lease of redrive job %d: %w", r.job.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	return whyNotHeld(ctx, q, r.job.ID, r.holder)
}

// whyNotHeld explains why holder no longer runs job id.
func whyNotHeld(ctx context.Context, q catalogdb.Querier, id int64, holder string) error {
	var state, by string
	if err := q.QueryRowContext(ctx, `SELECT state, holder FROM lily_redrive_jobs WHERE id = ?`, id).Scan(&state, &by); err != nil {
		return fmt.Errorf("catalog: redrive job %d: %w", id, err)
	}
	switch {
	case JobState(state) == JobCancelled:
		return fmt.Errorf("redrive job %d: %w", id, ErrJobCancelled)
	case by != holder:
		return fmt.Errorf("redrive job %d is now held by runner %s: %w", id, by, ErrJobLeaseLost)
	}
	return fmt.Errorf("redrive job %d ended (%s) meanwhile: %w", id, state, ErrJobLeaseLost)
}

// record adds the outcome of a sub-batch to the job inside tx: the counts,
// the cursor and, while sampling, the sampled messages.
func (r *jobRun) record(ctx context.Context, tx *catalogdb.Tx, changed []*catalog.Entry, outcome string) error {
	sent, refused := 0, 0
	if outcome == catalog.OutcomeRedriven {
		sent = len(changed)
		if r.sampling {
			for _, e := range changed {
				r.job.Sampled = append(r.job.Sampled, SampledMessage{EntryID: e.ID, Queue: cmp.Or(r.job.To, e.Queue), EventID: e.EventID, LedgerKey: ledger.Key(e.EventID, e.Body)})
			}
		}
	} else {
		refused = len(changed)
	}
	sampled, err := json.Marshal(r.job.Sampled)
	if err != nil {
		return err
	}
	if r.job.Sampled == nil {
		sampled = []byte("[]")
	}
	now := r.now().UnixMilli()
	if _, err := tx.ExecContext(ctx, `UPDATE lily_redrive_jobs SET sent = sent + ?, refused = refused + ?,
			after_id = CASE WHEN after_id < ? THEN ? ELSE after_id END, sampled = ?, updated_at = ?,
			lease_until = CASE WHEN holder = ? THEN ? ELSE lease_until END
		WHERE id = ?`, sent, refused, r.cursor, r.cursor, string(sampled), now, r.holder, now+r.lease.Milliseconds(), r.job.ID); err != nil {
		return fmt.Errorf("catalog: record the progress of redrive job %d: %w", r.job.ID, err)
	}
	r.job.Sent += sent
	r.job.Refused += refused
	r.job.Cursor = max(r.job.Cursor, r.cursor)
	return nil
}

// JobRunParams are the arguments of RunJob.
type JobRunParams struct {
	// Holder is the runner that claimed the job (CreateJob's Holder,
	// ClaimJob, ClaimJobID).
	Holder string
	// Lease is how long each renewal holds the job. Defaults to
	// DefaultJobLease.
	Lease time.Duration
	// Target, MaxRedrives, Batch, OnEntry, OnRate and Progress are as in
	// Params (Progress counts the whole job, resumed or not).
	Target      func(ctx context.Context, queue string) (Publisher, error)
	MaxRedrives func(queue string) int
	Batch       int
	OnEntry     func(e catalog.EntryRef, outcome string)
	OnRate      func(RateAsk)
	Progress    func(Progress)
	// Tick, if set, runs before each look at the sample, with its queues:
	// e.g. ingesting their broker DLQs.
	Tick func(ctx context.Context, queues []string) error
	// OnStage is called when a stage starts: StageSample, StageObserve
	// (with the sampled event IDs) or StageRest.
	OnStage func(stage string, sampled []string)
	// Poll is the pause between looks at the sample. Defaults to 200ms.
	Poll time.Duration
	// CancelOnStop cancels the job when ctx ends (an operator's interrupt
	// of a foreground redrive); otherwise the job is released for another
	// runner to resume (a server shutting down).
	CancelOnStop bool
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
}

// RunJob runs a job the caller holds to its end, resuming where it stopped:
// the rest of the sample (after the cursor), the watching of the sample
// until its window ends, then the rest of the selection. It returns the
// job as it ended; the error is the job's failure (or ErrJobCancelled,
// ErrJobLeaseLost). A runner that dies mid-job leaves its lease to run
// out; the next runner's RunJob goes on after the cursor: nothing is sent
// twice but the one batch in flight (and, through a transport publishing
// in the catalog's transaction, not even that).
func (rd *Redriver) RunJob(ctx context.Context, j *Job, p JobRunParams) (*Job, error) {
	ctx, end := rd.traceJob(ctx, j)
	out, err := rd.runJob(ctx, j, p)
	end(out, err)
	return out, err
}

// runJob is RunJob inside the job's span.
func (rd *Redriver) runJob(ctx context.Context, j *Job, p JobRunParams) (*Job, error) {
	if p.Now == nil {
		p.Now = time.Now
	}
	if p.Lease <= 0 {
		p.Lease = DefaultJobLease
	}
	r := &jobRun{rd: rd, job: j, holder: p.Holder, lease: p.Lease, now: p.Now, cursor: j.Cursor}
	if err := rd.startJob(ctx, r); err != nil {
		return rd.endJob(ctx, r, p, Result{}, err)
	}
	base := Params{Filter: j.Filter, Rate: j.Rate, MaxRedrives: p.MaxRedrives, Target: p.Target, Actor: j.Actor, Op: j.Op,
		Batch: p.Batch, OnEntry: p.OnEntry, OnRate: p.OnRate, IncludeCrashers: j.IncludeCrashers, NewConsumerVersion: j.NewConsumerVersion, To: j.To, job: r,
		Options: fmt.Sprintf(`"sample":%d,"observe":%q`, j.Sample, j.Observe.String())}
	if p.Progress != nil {
		base.Progress = func(rp Progress) {
			p.Progress(Progress{Done: j.Done(), Total: max(j.Total, j.Done()), Elapsed: rp.Elapsed})
		}
	}
	if j.Sample > 0 && !j.SampleClean {
		if !j.SampleDone {
			left := j.Sample - j.Done()
			if j.Limit > 0 {
				left = min(left, j.Limit-j.Done())
			}
			if left > 0 {
				stageTo(p.OnStage, StageSample, nil)
				sp := base
				sp.Filter.AfterID, sp.Limit, sp.Rate = j.Cursor, left, 0
				r.sampling = true
				res, err := rd.Redrive(ctx, sp)
				r.sampling = false
				if err != nil {
					return rd.endJob(ctx, r, p, res, err)
				}
			}
			if len(j.Sampled) == 0 { // nothing selected, or all at max_redrives
				return rd.endJob(ctx, r, p, Result{}, nil)
			}
			until := p.Now().Add(j.Observe)
			j.SampleUntil, j.SampleDone = &until, true
			if err := rd.jobUpdate(ctx, r, `sample_done = 1, sample_until = ?`, until.UnixMilli()); err != nil {
				return rd.endJob(ctx, r, p, Result{}, err)
			}
		}
		stageTo(p.OnStage, StageObserve, sampledIDs(j.Sampled))
		v, err := rd.watchSample(ctx, r, p)
		if err != nil {
			return rd.endJob(ctx, r, p, Result{}, err)
		}
		if err := rd.recordVerdict(ctx, r, v); err != nil {
			return rd.endJob(ctx, r, p, Result{}, err)
		}
		if !v.clean {
			return rd.endJob(ctx, r, p, Result{}, &SampleError{Detail: v.detail, Returned: v.returned})
		}
	}
	if j.Limit == 0 || j.Done() < j.Limit {
		stageTo(p.OnStage, StageRest, nil)
		rp := base
		rp.Filter.AfterID = j.Cursor
		if j.Limit > 0 {
			rp.Limit = j.Limit - j.Done()
		}
		res, err := rd.Redrive(ctx, rp)
		if err != nil {
			return rd.endJob(ctx, r, p, res, err)
		}
	}
	return rd.endJob(ctx, r, p, Result{}, nil)
}

// SampleError is a sample that did not prove the fix: the job stopped
// (JobStopped) with the rest of the selection pending.
type SampleError struct {
	Detail string
	// Returned are the new entries of sampled messages dead-lettered again.
	Returned []catalog.EntryRef
}

// Error says why the sample stopped the job.
func (e *SampleError) Error() string { return "redrive stopped: " + e.Detail }

func stageTo(on func(string, []string), stage string, sampled []string) {
	if on != nil {
		on(stage, sampled)
	}
}

func sampledIDs(ms []SampledMessage) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.EventID
	}
	return out
}

// startJob moves a queued job to running (or sampling) and, before a
// sample is sent, takes the watermark its returns are found above.
func (rd *Redriver) startJob(ctx context.Context, r *jobRun) error {
	j := r.job
	if j.State != JobQueued {
		if err := r.check(ctx, rd.db); err != nil {
			return err
		}
	} else {
		state := JobRunning
		if j.Sample > 0 {
			state = JobSampling
		}
		now := r.now().UnixMilli()
		res, err := rd.db.ExecContext(ctx, `UPDATE lily_redrive_jobs SET state = ?, started_at = ?, updated_at = ?, lease_until = ?
			WHERE id = ? AND holder = ? AND state = 'queued'`, string(state), now, now, now+r.lease.Milliseconds(), j.ID, r.holder)
		if err != nil {
			return fmt.Errorf("catalog: start redrive job %d: %w", j.ID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return whyNotHeld(ctx, rd.db, j.ID, r.holder)
		}
		j.State = state
		t := time.UnixMilli(now).UTC()
		j.StartedAt = &t
	}
	if j.Sample > 0 && j.sampleAt == 0 && !j.SampleDone {
		since, err := rd.store.LastID(ctx)
		if err != nil {
			return err
		}
		j.sinceID, j.sampleAt = since, r.now().UnixMilli()
		return rd.jobUpdate(ctx, r, `since_id = ?, sample_at = ?`, since, j.sampleAt)
	}
	return nil
}

// jobUpdate sets columns of the job the runner holds (set uses ?
// placeholders for args).
func (rd *Redriver) jobUpdate(ctx context.Context, r *jobRun, set string, args ...any) error {
	now := r.now().UnixMilli()
	args = append(args, now, now+r.lease.Milliseconds(), r.job.ID, r.holder)
	res, err := rd.db.ExecContext(ctx, `UPDATE lily_redrive_jobs SET `+set+`, updated_at = ?, lease_until = ?
		WHERE id = ? AND holder = ? AND state IN `+activeJobStates, args...)
	if err != nil {
		return fmt.Errorf("catalog: update redrive job %d: %w", r.job.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return whyNotHeld(ctx, rd.db, r.job.ID, r.holder)
	}
	return nil
}

// endJob records how the run ended and returns the job as stored.
func (rd *Redriver) endJob(ctx context.Context, r *jobRun, p JobRunParams, res Result, runErr error) (*Job, error) {
	j := r.job
	bg := context.WithoutCancel(ctx)
	var se *SampleError
	state, msg, failed := JobDone, "", 0
	switch {
	case runErr == nil:
	case errors.Is(runErr, ErrJobCancelled), errors.Is(runErr, ErrJobLeaseLost):
		out, err := rd.Job(bg, j.ID)
		if err != nil {
			return j, errors.Join(runErr, err)
		}
		return out, runErr
	case errors.As(runErr, &se):
		state, msg = JobStopped, runErr.Error()
	case ctx.Err() != nil && !p.CancelOnStop:
		// Stopped, not failed: release the job for the next runner.
		if _, err := rd.db.ExecContext(bg, `UPDATE lily_redrive_jobs SET holder = '', lease_until = 0, updated_at = ? WHERE id = ? AND holder = ?`,
			r.now().UnixMilli(), j.ID, r.holder); err != nil {
			return j, errors.Join(runErr, err)
		}
		out, err := rd.Job(bg, j.ID)
		if err != nil {
			return j, errors.Join(runErr, err)
		}
		return out, runErr
	case ctx.Err() != nil:
		state, msg = JobCancelled, interruptedPrefix+runErr.Error()
	default:
		state, msg = JobFailed, runErr.Error()
		failed = max(0, res.Selected-res.Redriven-res.NeedsManual)
	}
	now := r.now().UnixMilli()
	upd, err := rd.db.ExecContext(bg, `UPDATE lily_redrive_jobs SET state = ?, error = ?, failed = failed + ?, finished_at = ?, updated_at = ?,
			holder = '', lease_until = 0
		WHERE id = ? AND holder = ? AND state IN `+activeJobStates, string(state), msg, failed, now, now, j.ID, r.holder)
	if err != nil {
		return j, errors.Join(runErr, fmt.Errorf("catalog: end redrive job %d: %w", j.ID, err))
	}
	if n, _ := upd.RowsAffected(); n == 0 {
		runErr = errors.Join(runErr, whyNotHeld(bg, rd.db, j.ID, r.holder))
	}
	out, err := rd.Job(bg, j.ID)
	if err != nil {
		return j, errors.Join(runErr, err)
	}
	return out, runErr
}

// RunnerParams configure RunJobs.
type RunnerParams struct {
	JobRunParams
	// Interval is the pause between looks for a job to claim. Defaults to
	// 2s.
	Interval time.Duration
	// Logger logs each job taken and how it ended. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// RunJobs is a job runner: until ctx ends it claims the oldest queued or
// orphaned job (ClaimJob) and runs it (RunJob), one at a time. Several
// runners, in one process or many, share the catalog's jobs: each job is
// run by one at a time, and a runner that dies hands its job over when its
// lease runs out. It returns ctx's error.
func (rd *Redriver) RunJobs(ctx context.Context, p RunnerParams) error {
	if p.Interval <= 0 {
		p.Interval = 2 * time.Second
	}
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	for {
		j, err := rd.ClaimJob(ctx, p.Holder, p.Lease, p.Now())
		switch {
		case err != nil && ctx.Err() == nil:
			p.Logger.Warn("catalog: redrive job runner: claim", "runner", p.Holder, "err", err)
		case j != nil:
			p.Logger.Info("catalog: redrive job taken", "job", j.ID, "queue", j.Queue, "state", j.State, "done", j.Done(), "total", j.Total, "runner", p.Holder)
			out, err := rd.RunJob(ctx, j, p.JobRunParams)
			p.Logger.Info("catalog: redrive job ended", "job", out.ID, "state", out.State, "sent", out.Sent, "needs_manual", out.Refused,
				"total", out.Total, "runner", p.Holder, "err", err)
			continue // look for the next at once
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(p.Interval):
		}
	}
}

// Stages of a redrive job, as JobRunParams.OnStage reports them.
const (
	StageSample  = "sample"
	StageObserve = "observe"
	StageRest    = "rest"
)
