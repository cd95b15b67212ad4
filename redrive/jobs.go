package redrive

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogdb"
)

// JobState is a redrive job's state.
type JobState string

// Job states. Queued, running and sampling are active: at most one active
// job per queue. The others are final.
const (
	JobQueued    JobState = "queued"
	JobRunning   JobState = "running"
	JobSampling  JobState = "sampling" // the sample is being sent or watched
	JobDone      JobState = "done"
	JobFailed    JobState = "failed"
	JobCancelled JobState = "cancelled"
	// JobStopped: the sample did not prove the fix (dead-lettered again,
	// retried, or not acked within the window); the rest stays pending.
	JobStopped JobState = "stopped"
)

// Active reports whether st is queued, running or sampling.
func (st JobState) Active() bool { return st == JobQueued || st == JobRunning || st == JobSampling }

const activeJobStates = `('queued', 'running', 'sampling')`

// AllQueues is the queue of a job whose filter names no queue: it holds
// every queue while active.
const AllQueues = "*"

// DefaultJobLease is how long a runner holds a job between renewals (each
// batch and each look at a sample renews it).
const DefaultJobLease = 30 * time.Second

// Errors of the job operations; the returned errors wrap them and say more.
var (
	// ErrJobActive: the queue already has an active job (JobConflictError).
	ErrJobActive = errors.New("the queue already has an active redrive job")
	// ErrJobCancelled: the job was cancelled; the runner stopped.
	ErrJobCancelled = errors.New("the redrive job was cancelled")
	// ErrJobLeaseLost: another runner took the job over (this runner's
	// lease ran out); this runner stopped.
	ErrJobLeaseLost = errors.New("the redrive job's lease was lost to another runner")
	// ErrNoJob: no job has the ID.
	ErrNoJob = errors.New("no such redrive job")
	// ErrJobEnded: the job is done, stopped, failed or cancelled already.
	ErrJobEnded = errors.New("the redrive job already ended")
)

// JobConflictError is CreateJob's refusal: Job is the active job that holds
// the queue.
type JobConflictError struct {
	Queue string
	Job   *Job
}

// Error names the job that holds the queue and how to wait for it or
// cancel it.
func (e *JobConflictError) Error() string {
	j := e.Job
	on := "queue " + strconv.Quote(e.Queue)
	if e.Queue == AllQueues {
		on = "a redrive of every queue"
	}
	held := "queue " + strconv.Quote(j.Queue)
	if j.Queue == AllQueues {
		held = "every queue"
	}
	if j.Orphaned {
		// Waiting for it would be waiting for ever: say how to go on.
		return fmt.Sprintf("%s refused: redrive job %d (%s, by %s, created %s, %d of %d handled) holds %s, and no runner holds it "+
			"(its runner was interrupted or died): continue it with 'lily dlq resume %d' (or let 'lily serve' take it up), "+
			"or cancel it ('lily dlq cancel %d') and redrive again",
			on, j.ID, j.State, j.Actor, j.CreatedAt.Format(time.RFC3339), j.Done(), j.Total, held, j.ID, j.ID)
	}
	return fmt.Sprintf("%s refused: redrive job %d (%s, by %s, created %s, %d of %d handled) holds %s; one job per queue runs at a time: "+
		"wait for it ('lily dlq jobs') or cancel it ('lily dlq cancel %d')",
		on, j.ID, j.State, j.Actor, j.CreatedAt.Format(time.RFC3339), j.Done(), j.Total, held, j.ID)
}

// Unwrap returns ErrJobActive.
func (e *JobConflictError) Unwrap() error { return ErrJobActive }

// SampledMessage is one message of a job's sample.
type SampledMessage struct {
	EntryID int64  `json:"entry_id"`
	Queue   string `json:"queue"`
	EventID string `json:"event_id"`
	// LedgerKey is the identity the ledger records its ack under.
	LedgerKey string `json:"ledger_key"`
}

// Job is a redrive job as the catalog keeps it.
type Job struct {
	ID    int64  `json:"id"`
	Op    string `json:"op"`
	Queue string `json:"queue"`
	// catalog.Filter selects the entries (pending ones only).
	Filter catalog.Filter `json:"-"`
	// Selector is the filter as JSON (catalog.Filter.String).
	Selector json.RawMessage `json:"filter"`
	Limit    int             `json:"limit"`
	Rate     float64         `json:"rate"`
	Sample   int             `json:"sample"`
	Observe  time.Duration   `json:"-"`
	// ObserveText is Observe as a Go duration ("30s"), empty without a sample.
	ObserveText        string `json:"observe,omitempty"`
	NewConsumerVersion string `json:"new_consumer_version,omitempty"`
	IncludeCrashers    bool   `json:"include_crashers"`
	// To is the queue a redirected job sends to instead of the entries'
	// source (Params.To); empty for a plain redrive.
	To string `json:"to,omitempty"`
	// Total is the plan made when the job was created: the pending entries
	// it would handle (what a dry run counts).
	Total int `json:"total"`
	// HeldBack are the delivery_limit entries the selection leaves out.
	HeldBack int      `json:"held_back"`
	State    JobState `json:"state"`
	// Sent were confirmed by the transport and marked redriven; Refused
	// were at max_redrives and marked needs_manual.
	Sent    int `json:"sent"`
	Refused int `json:"refused"`
	// Failed were selected but not confirmed when the job failed; they
	// stay pending.
	Failed int `json:"failed"`
	// Cursor is the last entry ID handled: a resumed job goes on after it.
	Cursor int64 `json:"cursor"`
	// Sampled are the messages of the sample; SampleDone is set once the
	// sample was sent, SampleClean once it was proved (acked).
	Sampled     []SampledMessage `json:"sampled,omitempty"`
	SampleDone  bool             `json:"sample_done"`
	SampleClean bool             `json:"sample_clean"`
	// SampleUntil is when the watching of the sample ends.
	SampleUntil *time.Time `json:"sample_until,omitempty"`
	// Returned are the new entries of sampled messages dead-lettered again.
	Returned   []catalog.EntryRef `json:"returned,omitempty"`
	Actor      string             `json:"actor"`
	CreatedAt  time.Time          `json:"created_at"`
	StartedAt  *time.Time         `json:"started_at,omitempty"`
	UpdatedAt  time.Time          `json:"updated_at"`
	FinishedAt *time.Time         `json:"finished_at,omitempty"`
	Error      string             `json:"error,omitempty"`
	// Holder is the runner holding the job until LeaseUntil.
	Holder     string     `json:"holder,omitempty"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	// Orphaned: the job started and is active, but no runner holds it
	// (its runner was interrupted and let it go, or died and its lease ran
	// out, as read when the job was loaded). It holds its queue until
	// 'lily dlq resume' or 'lily serve' takes it up, or it is cancelled.
	Orphaned bool `json:"orphaned,omitempty"`

	sinceID  int64
	sampleAt int64
}

// Done is the number of entries handled: sent or refused.
func (j *Job) Done() int { return j.Sent + j.Refused }

// JobSpec are the arguments of CreateJob.
type JobSpec struct {
	// catalog.Filter selects the entries; only pending ones are redriven.
	Filter catalog.Filter
	// Limit caps the entries handled, sample included; 0: all.
	Limit int
	// Rate is the most messages per second after the sample; 0: no limit.
	Rate float64
	// Sample entries are sent first and must be acked within Observe.
	Sample  int
	Observe time.Duration
	// NewConsumerVersion and IncludeCrashers let delivery_limit entries
	// in (Params).
	NewConsumerVersion string
	IncludeCrashers    bool
	// To redirects the job to this queue (Params.To).
	To string
	// Actor is who decides. Defaults to catalog.DefaultActor().
	Actor string
	// Op is the audit operation ID. Defaults to catalog.NewOp.
	Op string
	// Holder, if set, claims the job at once for this runner (a job run in
	// the foreground): it starts running instead of queued.
	Holder string
	// Lease is the claim's length with a Holder. Defaults to DefaultJobLease.
	Lease time.Duration
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
}

// CreateJob stores a redrive job: its plan (the pending entries it would
// handle, held-back crashers apart) is counted now. It refuses, with a
// *JobConflictError naming the active job, when the queue (or, for a
// filter without a queue, any queue) has an active job.
func (rd *Redriver) CreateJob(ctx context.Context, sp JobSpec) (*Job, error) {
	switch {
	case sp.Limit < 0:
		return nil, fmt.Errorf("catalog: job limit %d: must be >= 0 (0: all that match)", sp.Limit)
	case sp.Rate < 0:
		return nil, fmt.Errorf("catalog: job rate %g: must be >= 0 (0: no limit)", sp.Rate)
	case sp.Sample < 0 || (sp.Sample > 0 && sp.Observe <= 0):
		return nil, fmt.Errorf("catalog: job sample %d with observe %s: a sample needs a positive observe window", sp.Sample, sp.Observe)
	}
	now := time.Now
	if sp.Now != nil {
		now = sp.Now
	}
	actor := sp.Actor
	if actor == "" {
		actor = catalog.DefaultActor()
	}
	op := sp.Op
	if op == "" {
		op = catalog.NewOp(now())
	}
	f := sp.Filter
	f.States, f.AfterID = []catalog.State{catalog.StatePending}, 0
	hold := crasherHold{include: sp.IncludeCrashers, version: sp.NewConsumerVersion}
	if explicitPick(f) {
		hold.include = true
	}
	total, heldBack, err := rd.planCounts(ctx, f, hold, sp.Limit)
	if err != nil {
		return nil, err
	}
	queue := f.Queue
	if queue == "" {
		queue = AllQueues
	}
	t := now().UnixMilli()
	state, holder, leaseUntil, started := JobQueued, "", int64(0), int64(0)
	if sp.Holder != "" {
		lease := sp.Lease
		if lease <= 0 {
			lease = DefaultJobLease
		}
		state, holder, leaseUntil, started = JobRunning, sp.Holder, t+lease.Milliseconds(), t
		if sp.Sample > 0 {
			state = JobSampling
		}
	}
	var id int64
	err = rd.db.WithKeyed(ctx, jobScope, func(tx *catalogdb.Tx) error {
		return tx.QueryRowContext(ctx, `INSERT INTO lily_redrive_jobs(op, queue, filter, max_entries, rate_milli, sample, observe_ms,
			new_consumer_version, include_crashers, total, held_back, state, actor, created_at, started_at, updated_at, holder, lease_until, to_queue)
		SELECT CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT),
			CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS TEXT),
			CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS TEXT)
		WHERE NOT EXISTS (SELECT 1 FROM lily_redrive_jobs WHERE state IN `+activeJobStates+` AND (queue = ? OR queue = '*' OR ? = '*'))
		RETURNING id`,
			op, queue, f.String(), sp.Limit, int64(sp.Rate*1000), sp.Sample, sp.Observe.Milliseconds(),
			sp.NewConsumerVersion, catalogdb.BoolInt(sp.IncludeCrashers), total, heldBack, string(state), actor,
			t, started, t, holder, leaseUntil, sp.To, queue, queue).Scan(&id)
	})
	if err != nil {
		if c, cerr := rd.ActiveJob(ctx, queue); cerr == nil && c != nil {
			return nil, &JobConflictError{Queue: queue, Job: c}
		}
		if errors.Is(err, sql.ErrNoRows) { // the holder finished meanwhile
			return nil, fmt.Errorf("catalog: create redrive job on queue %q: %w (try again)", queue, ErrJobActive)
		}
		return nil, fmt.Errorf("catalog: create redrive job on queue %q: %w", queue, err)
	}
	return rd.Job(ctx, id)
}

// jobScope is the key of the keyed transactions that make a job active
// (CreateJob, reopenJob): their "no active job holds the queue" check and
// their write run one after the other on PostgreSQL, so a job of every
// queue and a job of one queue created at once never both start. The
// partial unique index lily_redrive_jobs_active sees one queue's jobs only,
// and under read committed each creator's NOT EXISTS would see the
// catalog before the other's commit. Only job creation takes this key: no
// message, redrive batch or other decision waits for it.
var jobScope = []string{"redrive-jobs\x1factivate"}

// explicitPick reports whether f names its entries one by one (IDs or
// event IDs): such a redrive is not a bulk redrive, crashers go too.
func explicitPick(f catalog.Filter) bool { return len(f.IDs) > 0 || len(f.EventIDs) > 0 }

// ActiveJob returns the active job that holds queue (a job on every queue
// holds them all; AllQueues asks for any), nil if none.
func (rd *Redriver) ActiveJob(ctx context.Context, queue string) (*Job, error) {
	js, err := rd.queryJobs(ctx, ` WHERE state IN `+activeJobStates+` AND (queue = ? OR queue = '*' OR ? = '*') ORDER BY id LIMIT 1`, queue, queue)
	if err != nil || len(js) == 0 {
		return nil, err
	}
	return js[0], nil
}

const jobCols = `id, op, queue, filter, max_entries, rate_milli, sample, observe_ms, new_consumer_version, include_crashers,
	total, held_back, state, sent, refused, failed, after_id, since_id, sample_at, sample_until, sample_done, sample_clean,
	sampled, returned, actor, created_at, started_at, updated_at, finished_at, error, holder, lease_until, to_queue`

func (rd *Redriver) queryJobs(ctx context.Context, rest string, args ...any) ([]*Job, error) {
	rows, err := rd.db.QueryContext(ctx, `SELECT `+jobCols+` FROM lily_redrive_jobs`+rest, args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: redrive jobs: %w", err)
	}
	defer rows.Close()
	var out []*Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

func scanJob(r interface{ Scan(...any) error }) (*Job, error) {
	var j Job
	var filter, state, sampled, returned string
	var rateMilli, observeMs, include, sampleUntil, sampleDone, clean, created, started, updated, finished, lease int64
	if err := r.Scan(&j.ID, &j.Op, &j.Queue, &filter, &j.Limit, &rateMilli, &j.Sample, &observeMs, &j.NewConsumerVersion, &include,
		&j.Total, &j.HeldBack, &state, &j.Sent, &j.Refused, &j.Failed, &j.Cursor, &j.sinceID, &j.sampleAt, &sampleUntil, &sampleDone, &clean,
		&sampled, &returned, &j.Actor, &created, &started, &updated, &finished, &j.Error, &j.Holder, &lease, &j.To); err != nil {
		return nil, fmt.Errorf("catalog: read redrive job: %w", err)
	}
	f, err := catalog.ParseFilter(filter)
	if err != nil {
		return nil, fmt.Errorf("catalog: redrive job %d: filter %s: %w", j.ID, filter, err)
	}
	j.Filter, j.Selector = f, json.RawMessage(filter)
	j.Rate, j.Observe = float64(rateMilli)/1000, time.Duration(observeMs)*time.Millisecond
	if j.Sample > 0 {
		j.ObserveText = j.Observe.String()
	}
	j.IncludeCrashers, j.SampleDone, j.SampleClean = include != 0, sampleDone != 0, clean != 0
	j.State = JobState(state)
	if err := json.Unmarshal([]byte(sampled), &j.Sampled); err != nil {
		return nil, fmt.Errorf("catalog: redrive job %d: sampled: %w", j.ID, err)
	}
	if err := json.Unmarshal([]byte(returned), &j.Returned); err != nil {
		return nil, fmt.Errorf("catalog: redrive job %d: returned: %w", j.ID, err)
	}
	j.CreatedAt, j.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	j.StartedAt, j.FinishedAt, j.SampleUntil, j.LeaseUntil = optTime(started), optTime(finished), optTime(sampleUntil), optTime(lease)
	j.Orphaned = j.State.Active() && j.State != JobQueued && lease < time.Now().UnixMilli()
	return &j, nil
}

func optTime(ms int64) *time.Time {
	if ms == 0 {
		return nil
	}
	t := time.UnixMilli(ms).UTC()
	return &t
}

// Job returns the job with the ID; the error wraps ErrNoJob when none.
func (rd *Redriver) Job(ctx context.Context, id int64) (*Job, error) {
	js, err := rd.queryJobs(ctx, ` WHERE id = ?`, id)
	if err != nil {
		return nil, err
	}
	if len(js) == 0 {
		return nil, fmt.Errorf("redrive job %d: %w ('lily dlq jobs' lists them)", id, ErrNoJob)
	}
	return js[0], nil
}

// JobQuery selects jobs for Jobs.
type JobQuery struct {
	// Queue, if set, keeps the jobs of that queue (and of every queue).
	Queue string
	// Active keeps the queued, running and sampling jobs.
	Active bool
	// Limit caps the jobs listed, newest first. Defaults to 100.
	Limit int
}

// Jobs lists redrive jobs, newest first.
func (rd *Redriver) Jobs(ctx context.Context, q JobQuery) ([]*Job, error) {
	var conds []string
	var args []any
	if q.Queue != "" {
		conds = append(conds, "(queue = ? OR queue = '*')")
		args = append(args, q.Queue)
	}
	if q.Active {
		conds = append(conds, "state IN "+activeJobStates)
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	return rd.queryJobs(ctx, where+` ORDER BY id DESC LIMIT ?`, append(args, limit)...)
}

// CancelJob cancels an active job: a queued job never starts; a running
// one stops before its next batch (what was confirmed stays redriven, the
// rest stays pending). The cancellation is audited under the job's
// operation. Cancelling a job that already ended is an error that says
// how it ended.
func (rd *Redriver) CancelJob(ctx context.Context, id int64, actor string) (*Job, error) {
	if actor == "" {
		actor = catalog.DefaultActor()
	}
	ctx, end := rd.traceCancel(ctx, id, actor)
	j, err := rd.cancelJob(ctx, id, actor)
	end(j, err)
	return j, err
}

// cancelJob is CancelJob inside its span.
func (rd *Redriver) cancelJob(ctx context.Context, id int64, actor string) (*Job, error) {
	now := time.Now().UnixMilli()
	res, err := rd.db.ExecContext(ctx, `UPDATE lily_redrive_jobs SET state = 'cancelled', finished_at = ?, updated_at = ?, error = ?
		WHERE id = ? AND state IN `+activeJobStates, now, now, "cancelled by "+actor, id)
	if err != nil {
		return nil, fmt.Errorf("catalog: cancel redrive job %d: %w", id, err)
	}
	j, err := rd.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return j, fmt.Errorf("redrive job %d ended (%s) before: nothing to cancel: %w", id, j.State, ErrJobEnded)
	}
	d := newDecision(j.Op, actor, fmt.Sprintf(`{"job":%d}`, id), nil)
	detail := fmt.Sprintf("redrive job %d cancelled after %d sent and %d marked needs_manual of %d; the rest stays pending", id, j.Sent, j.Refused, j.Total)
	if err := rd.store.AppendAudit(context.WithoutCancel(ctx), d.Record(catalog.ActionRedrive, catalog.OutcomeStopped, false, nil, detail)); err != nil {
		return j, err
	}
	return j, nil
}

// ClaimJob takes the oldest active job that no runner holds (queued, or
// orphaned: its holder's lease ran out) for holder until now+lease, in one
// conditional statement: two runners never hold one job. It returns nil
// when there is none.
func (rd *Redriver) ClaimJob(ctx context.Context, holder string, lease time.Duration, now time.Time) (*Job, error) {
	if lease <= 0 {
		lease = DefaultJobLease
	}
	t := now.UnixMilli()
	var id int64
	err := rd.db.QueryRowContext(ctx, `UPDATE lily_redrive_jobs SET holder = ?, lease_until = ?, updated_at = ?
		WHERE id = (SELECT id FROM lily_redrive_jobs WHERE state IN `+activeJobStates+` AND lease_until < ? ORDER BY id LIMIT 1)
			AND state IN `+activeJobStates+` AND lease_until < ?
		RETURNING id`, holder, t+lease.Milliseconds(), t, t, t).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: claim a redrive job: %w", err)
	}
	return rd.Job(ctx, id)
}

// ClaimJobID takes the job with the ID for holder, as ClaimJob does, if it
// is active and no runner holds it; otherwise the error says why.
func (rd *Redriver) ClaimJobID(ctx context.Context, id int64, holder string, lease time.Duration, now time.Time) (*Job, error) {
	if lease <= 0 {
		lease = DefaultJobLease
	}
	t := now.UnixMilli()
	res, err := rd.db.ExecContext(ctx, `UPDATE lily_redrive_jobs SET holder = ?, lease_until = ?, updated_at = ?
		WHERE id = ? AND state IN `+activeJobStates+` AND (lease_until < ? OR holder = ?)`, holder, t+lease.Milliseconds(), t, id, t, holder)
	if err != nil {
		return nil, fmt.Errorf("catalog: claim redrive job %d: %w", id, err)
	}
	j, err := rd.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		if j.Interrupted() {
			return rd.reopenJob(ctx, j, holder, lease, now)
		}
		if !j.State.Active() {
			return nil, fmt.Errorf("redrive job %d ended (%s) before: nothing to resume: %w", id, j.State, ErrJobEnded)
		}
		return nil, fmt.Errorf("redrive job %d is held by runner %s until %s: it is running there (it is taken over only once that lease runs out)",
			id, j.Holder, j.LeaseUntil.Format(time.RFC3339))
	}
	return j, nil
}

// interruptedPrefix starts the error of a job its foreground runner
// cancelled when interrupted (JobRunParams.CancelOnStop).
const interruptedPrefix = "interrupted: "

// Interrupted reports whether the job was cancelled by an interrupt of
// its foreground runner (Ctrl-C), not by an operator: ClaimJobID takes
// such a job up again.
func (j *Job) Interrupted() bool {
	return j.State == JobCancelled && strings.HasPrefix(j.Error, interruptedPrefix)
}

// reopenJob makes an interrupted job active again for holder, unless
// another active job holds its queue meanwhile (a *JobConflictError): it
// goes on after its last handled entry, the sample first if it was not
// done.
func (rd *Redriver) reopenJob(ctx context.Context, j *Job, holder string, lease time.Duration, now time.Time) (*Job, error) {
	t := now.UnixMilli()
	var n int64
	err := rd.db.WithKeyed(ctx, jobScope, func(tx *catalogdb.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE lily_redrive_jobs SET state = CASE WHEN sample > 0 AND sample_done = 0 THEN 'sampling' ELSE 'running' END,
				error = '', finished_at = 0, holder = ?, lease_until = ?, updated_at = ?
			WHERE id = ? AND state = 'cancelled' AND error LIKE 'interrupted: %'
				AND NOT EXISTS (SELECT 1 FROM lily_redrive_jobs WHERE state IN `+activeJobStates+` AND (queue = ? OR queue = '*' OR ? = '*'))`,
			holder, t+lease.Milliseconds(), t, j.ID, j.Queue, j.Queue)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	if err == nil && n == 1 {
		return rd.Job(ctx, j.ID)
	}
	if c, cerr := rd.ActiveJob(ctx, j.Queue); cerr == nil && c != nil {
		return nil, &JobConflictError{Queue: j.Queue, Job: c}
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: resume interrupted redrive job %d: %w", j.ID, err)
	}
	return nil, fmt.Errorf("redrive job %d changed meanwhile (now %s): resume it again", j.ID, j.State)
}
