package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/redrive"
)

// redriveRequest is POST /api/redrives: 'lily dlq redrive' as JSON.
type redriveRequest struct {
	Filter filterJSON `json:"filter"`
	// Limit caps the selection, sample included; 0 means all.
	Limit int `json:"limit"`
	// DryRun plans and changes nothing (audited); answered at once.
	DryRun bool `json:"dry_run"`
	// Sample entries are redriven first and watched for Observe.
	Sample  int    `json:"sample"`
	Observe string `json:"observe"`
	// Rate is the most messages per second for the rest; 0: no limit.
	Rate float64 `json:"rate"`
	// IncludeCrashers also sends delivery_limit entries (crash-type
	// poison), held back from a bulk redrive otherwise.
	IncludeCrashers bool `json:"include_crashers"`
	// NewConsumerVersion is the consumer version now running, which fixes
	// the crash: delivery_limit entries of other versions are sent.
	NewConsumerVersion string `json:"new_consumer_version"`
	// To redirects the redrive to this configured queue instead of the
	// entries' source (redirect.go).
	To string `json:"to"`
}

// validate checks the request as 'lily dlq redrive' checks its flags.
func (q redriveRequest) validate() (time.Duration, error) {
	observe, err := durationField("observe", q.Observe)
	if err != nil {
		return 0, err
	}
	switch {
	case q.Limit < 0:
		return 0, badField("limit", "limit %d: must be >= 0 (0: all that match)", q.Limit)
	case q.Sample < 0 || q.Sample > 10000:
		return 0, badField("sample", "sample %d: must be in 0..10000 (a sample is a few messages to watch)", q.Sample)
	case q.Sample > 0 && observe <= 0:
		return 0, badField("observe", "sample %d needs observe: how long to watch the sample (e.g. \"30s\")", q.Sample)
	case observe > 0 && q.Sample == 0:
		return 0, badField("sample", "observe %q needs sample: the number of entries to redrive first and watch", q.Observe)
	case observe > time.Hour:
		return 0, badField("observe", "observe %q: at most 1h", q.Observe)
	case q.Rate < 0:
		return 0, badField("rate", "rate %g: must be > 0 messages per second (0: no limit)", q.Rate)
	case q.Sample > 0 && q.Limit > 0 && q.Sample > q.Limit:
		return 0, badField("sample", "sample %d: must be <= limit %d", q.Sample, q.Limit)
	case q.IncludeCrashers && q.NewConsumerVersion != "":
		return 0, badField("new_consumer_version", "include_crashers and new_consumer_version %q: give one (include_crashers sends every delivery_limit entry)", q.NewConsumerVersion)
	}
	return observe, nil
}

// dryRunAnswer is the answer of a dry run.
type dryRunAnswer struct {
	Op          string        `json:"op"`
	DryRun      bool          `json:"dry_run"`
	Selected    int           `json:"selected"`
	Redriven    int           `json:"would_redrive"`
	NeedsManual int           `json:"would_need_manual"`
	HeldBack    int           `json:"held_back"`
	Entries     []plannedJSON `json:"entries"`
	Truncated   bool          `json:"truncated"`
}

// plannedJSON is one entry of a dry run's plan.
type plannedJSON struct {
	catalog.EntryRef
	Outcome string `json:"outcome"`
}

// handleRedrive plans (dry_run) or starts a redrive job: 200 with the
// plan, or 202 with the job (Location: /api/redrives/{id}); 409 when the
// queue already has an active job.
func (s *Server) handleRedrive(w http.ResponseWriter, r *http.Request, p *principal) {
	var req redriveRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	observe, err := req.validate()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f, err := req.Filter.catalogFilter(s.o.Now(), nil)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	op := catalog.NewOp(s.o.Now())
	if err := s.checkRedirect(r, p, op, f, req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.DryRun {
		params := redrive.Params{Filter: f, Limit: req.Limit, DryRun: true, Rate: req.Rate, MaxRedrives: s.maxRedrives,
			Target: s.o.Target, Actor: p.name, Op: op, IncludeCrashers: req.IncludeCrashers, NewConsumerVersion: req.NewConsumerVersion, To: req.To}
		if req.Sample > 0 {
			params.Options = fmt.Sprintf(`"sample":%d,"observe":%q`, req.Sample, observe.String())
		}
		out := dryRunAnswer{Op: op, DryRun: true, Entries: []plannedJSON{}}
		params.OnEntry = func(e catalog.EntryRef, outcome string) {
			if len(out.Entries) < maxListed {
				out.Entries = append(out.Entries, plannedJSON{EntryRef: e, Outcome: outcome})
			} else {
				out.Truncated = true
			}
		}
		res, err := s.redriver().Redrive(r.Context(), params)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		out.Selected, out.Redriven, out.NeedsManual, out.HeldBack = res.Selected, res.Redriven, res.NeedsManual, res.HeldBack
		writeJSON(w, http.StatusOK, out)
		return
	}
	if s.o.Target == nil {
		writeError(w, http.StatusNotImplemented, apiError{Error: "this server has no redrive target (Options.Target): only dry runs are possible", Field: "dry_run"})
		return
	}
	j, err := redrive.New(s.o.Store).CreateJob(r.Context(), redrive.JobSpec{Filter: f, Limit: req.Limit, Rate: req.Rate, Sample: req.Sample,
		Observe: observe, IncludeCrashers: req.IncludeCrashers, NewConsumerVersion: req.NewConsumerVersion, To: req.To, Actor: p.name, Op: op,
		Holder: s.jobs.holder, Lease: s.jobs.lease}) // leases on the real clock, as every runner's
	var conflict *redrive.JobConflictError
	if errors.As(err, &conflict) {
		writeError(w, http.StatusConflict, apiError{Error: err.Error(), Field: "filter"})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// The answer is the job as created: the runner changes j from now on.
	created := toJobJSON(j)
	s.wg.Add(1)
	go s.runJob(j)
	w.Header().Set("Location", "/api/redrives/"+strconv.FormatInt(j.ID, 10))
	writeJSON(w, http.StatusAccepted, created)
}

// jobJSON is a redrive job as the API shows it (GET /api/redrives/{id}).
type jobJSON struct {
	ID    int64  `json:"id"`
	Op    string `json:"op"`
	Queue string `json:"queue"`
	Actor string `json:"actor"`
	// State is queued, running, sampling, done, stopped (the sample did not
	// prove the fix; the rest stays pending), failed or cancelled.
	State redrive.JobState `json:"state"`
	// Stage is sample, observe or rest while active.
	Stage string `json:"stage,omitempty"`
	// Total is the plan: the pending entries selected when the job was
	// created.
	Total       int `json:"total"`
	Done        int `json:"done"`
	Redriven    int `json:"redriven"`
	NeedsManual int `json:"needs_manual"`
	// Failed entries were selected but not confirmed; they stay pending.
	Failed int `json:"failed"`
	// HeldBack are the delivery_limit entries left out.
	HeldBack    int                `json:"held_back"`
	Cursor      int64              `json:"cursor"`
	Sampled     []string           `json:"sampled,omitempty"`
	SampleClean bool               `json:"sample_clean"`
	Returned    []catalog.EntryRef `json:"returned,omitempty"`
	Error       string             `json:"error,omitempty"`
	Filter      json.RawMessage    `json:"filter"`
	Limit       int                `json:"limit"`
	Rate        float64            `json:"rate"`
	Sample      int                `json:"sample"`
	Observe     string             `json:"observe,omitempty"`
	// To is the queue a redirected job sends to instead of the source.
	To string `json:"to,omitempty"`
	// Holder is the runner holding an active job until LeaseUntil.
	Holder     string     `json:"holder,omitempty"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

func toJobJSON(j *redrive.Job) jobJSON {
	v := jobJSON{ID: j.ID, Op: j.Op, Queue: j.Queue, Actor: j.Actor, State: j.State, Total: j.Total, Done: j.Done(),
		Redriven: j.Sent, NeedsManual: j.Refused, Failed: j.Failed, HeldBack: j.HeldBack, Cursor: j.Cursor,
		SampleClean: j.SampleClean, Returned: j.Returned, Error: j.Error, Filter: j.Selector, Limit: j.Limit, Rate: j.Rate,
		Sample: j.Sample, Observe: j.ObserveText, CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, UpdatedAt: j.UpdatedAt,
		FinishedAt: j.FinishedAt, To: j.To}
	for _, m := range j.Sampled {
		v.Sampled = append(v.Sampled, m.EventID)
	}
	if j.State.Active() {
		v.Holder, v.LeaseUntil = j.Holder, j.LeaseUntil
	}
	switch {
	case j.State == redrive.JobSampling && !j.SampleDone:
		v.Stage = redrive.StageSample
	case j.State == redrive.JobSampling:
		v.Stage = redrive.StageObserve
	case j.State == redrive.JobRunning:
		v.Stage = redrive.StageRest
	}
	return v
}

// jobs is this server's identity as a job runner: the jobs themselves are
// rows of the catalog (redrive.Redriver.CreateJob), shared with the CLI and
// other servers.
type jobs struct {
	holder string
	lease  time.Duration
}

func newJobs(lease time.Duration) *jobs {
	if lease <= 0 {
		lease = redrive.DefaultJobLease
	}
	host, _ := os.Hostname()
	return &jobs{holder: fmt.Sprintf("api-%s-%d-%s", host, os.Getpid(), randomHex(4)), lease: lease}
}

// runJob runs a job this server created to its end. When the server is
// closed first, the job is released, not cancelled: the next runner (a
// 'lily serve' replica, this one restarted) resumes it.
func (s *Server) runJob(j *redrive.Job) {
	defer s.wg.Done()
	p := redrive.JobRunParams{Holder: s.jobs.holder, Lease: s.jobs.lease, Target: s.o.Target, MaxRedrives: s.maxRedrives}
	if s.o.Tick != nil {
		p.Tick = s.o.Tick
	}
	if s.o.Redrives != nil {
		p.OnEntry = func(e catalog.EntryRef, outcome string) { s.o.Redrives.Redrive(e.Queue, outcome) }
	}
	out, err := s.redriver().RunJob(s.ctx, j, p)
	if s.o.Redrives != nil && out.State == redrive.JobFailed {
		q := out.Queue
		if q == redrive.AllQueues {
			q = ""
		}
		if q != "" {
			for range out.Failed {
				s.o.Redrives.Redrive(q, catalog.OutcomeFailed)
			}
		}
	}
	s.o.Logger.Info("httpapi: redrive job ended", "job", out.ID, "op", out.Op, "actor", out.Actor, "state", out.State,
		"redriven", out.Sent, "needs_manual", out.Refused, "failed", out.Failed, "err", err)
}

func (s *Server) handleJobs(w http.ResponseWriter, r *http.Request, _ *principal) {
	js, err := redrive.New(s.o.Store).Jobs(r.Context(), redrive.JobQuery{Queue: r.URL.Query().Get("queue"), Limit: 200})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]jobJSON, len(js))
	for i, j := range js {
		out[i] = toJobJSON(j)
	}
	writeJSON(w, http.StatusOK, map[string]any{"redrives": out})
}

// jobByPath returns the job named by the path's {id}, or answers 404.
func (s *Server) jobByPath(w http.ResponseWriter, r *http.Request) (*redrive.Job, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no redrive job %q: job IDs are numbers (GET /api/redrives lists them)", r.PathValue("id")), Field: "id"})
		return nil, false
	}
	j, err := redrive.New(s.o.Store).Job(r.Context(), id)
	if errors.Is(err, redrive.ErrNoJob) {
		writeError(w, http.StatusNotFound, apiError{Error: err.Error(), Field: "id"})
		return nil, false
	}
	if err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	return j, true
}

func (s *Server) handleJob(w http.ResponseWriter, r *http.Request, _ *principal) {
	if j, ok := s.jobByPath(w, r); ok {
		writeJSON(w, http.StatusOK, toJobJSON(j))
	}
}

// handleCancel cancels an active job wherever it runs: its runner stops
// before the next batch; what was confirmed stays redriven, the rest stays
// pending. 409 when the job already ended.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request, p *principal) {
	j, ok := s.jobByPath(w, r)
	if !ok {
		return
	}
	j, err := s.redriver().CancelJob(r.Context(), j.ID, p.name)
	if errors.Is(err, redrive.ErrJobEnded) {
		writeError(w, http.StatusConflict, apiError{Error: err.Error(), Field: "id"})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, toJobJSON(j))
}

// redriver is the redriver of the API's redrives, traced when
// Options.TracerProvider is set.
func (s *Server) redriver() *redrive.Redriver {
	rd := redrive.New(s.o.Store)
	rd.TracerProvider = s.o.TracerProvider
	return rd
}
