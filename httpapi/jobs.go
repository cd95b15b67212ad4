package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/lily-mq/lily/catalog"
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
	Entries     []plannedJSON `json:"entries"`
	Truncated   bool          `json:"truncated"`
}

// plannedJSON is one entry of a dry run's plan.
type plannedJSON struct {
	catalog.EntryRef
	Outcome string `json:"outcome"`
}

// handleRedrive plans (dry_run) or starts a redrive job: 200 with the
// plan, or 202 with the job (Location: /api/redrives/{id}).
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
	params := catalog.RedriveParams{Filter: f, Limit: req.Limit, DryRun: req.DryRun, Rate: req.Rate, MaxRedrives: s.maxRedrives,
		Target: s.o.Target, Actor: p.name, Op: catalog.NewOp(s.o.Now())}
	if req.Sample > 0 {
		params.Options = fmt.Sprintf(`"sample":%d,"observe":%q`, req.Sample, observe.String())
	}
	if req.DryRun {
		out := dryRunAnswer{Op: params.Op, DryRun: true, Entries: []plannedJSON{}}
		params.OnEntry = func(e catalog.EntryRef, outcome string) {
			if len(out.Entries) < maxListed {
				out.Entries = append(out.Entries, plannedJSON{EntryRef: e, Outcome: outcome})
			} else {
				out.Truncated = true
			}
		}
		res, err := s.o.Store.Redrive(r.Context(), params)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		out.Selected, out.Redriven, out.NeedsManual = res.Selected, res.Redriven, res.NeedsManual
		writeJSON(w, http.StatusOK, out)
		return
	}
	if s.o.Target == nil {
		writeError(w, http.StatusNotImplemented, apiError{Error: "this server has no redrive target (Options.Target): only dry runs are possible", Field: "dry_run"})
		return
	}
	counts, err := s.o.Store.CountBy(r.Context(), "state", catalog.Filter{Queue: f.Queue, Reason: f.Reason, ErrorType: f.ErrorType,
		Fingerprint: f.Fingerprint, ConsumerVersion: f.ConsumerVersion, Source: f.Source, Key: f.Key, Type: f.Type, IDs: f.IDs,
		EventIDs: f.EventIDs, DeadLetteredBefore: f.DeadLetteredBefore, DeadLetteredAfter: f.DeadLetteredAfter,
		RedriveCount: f.RedriveCount, States: []catalog.State{catalog.StatePending}})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	total := int(counts[string(catalog.StatePending)])
	if req.Limit > 0 {
		total = min(total, req.Limit)
	}
	j := s.jobs.add(&job{v: jobJSON{Op: params.Op, Actor: p.name, State: jobRunning, Total: total, Request: req, StartedAt: s.o.Now().UTC()}})
	s.wg.Add(1)
	go s.runJob(j, catalog.StagedRedriveParams{RedriveParams: params, Sample: req.Sample, Observe: observe, Tick: s.o.Tick})
	w.Header().Set("Location", "/api/redrives/"+j.v.ID)
	writeJSON(w, http.StatusAccepted, j.snapshot())
}

// Job states.
const (
	jobRunning   = "running"
	jobSucceeded = "succeeded"
	jobStopped   = "stopped" // the sample came back: the rest was not sent
	jobFailed    = "failed"
	jobCancelled = "cancelled"
)

// job is one redrive running in the background; v is guarded by mu.
type job struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	v      jobJSON
}

// jobJSON is a redrive job as GET /api/redrives/{id} shows it.
type jobJSON struct {
	ID    string `json:"id"`
	Op    string `json:"op"`
	Actor string `json:"actor"`
	// State is running, succeeded, stopped (the sample was dead-lettered
	// again; the rest stays pending), failed or cancelled.
	State string `json:"state"`
	// Stage is sample, observe or rest while running.
	Stage string `json:"stage,omitempty"`
	// Total is the pending entries selected when the job started.
	Total       int `json:"total"`
	Done        int `json:"done"`
	Redriven    int `json:"redriven"`
	NeedsManual int `json:"needs_manual"`
	// Failed entries were selected but not confirmed; they stay pending.
	Failed      int                `json:"failed"`
	Sampled     []string           `json:"sampled,omitempty"`
	SampleClean bool               `json:"sample_clean"`
	Returned    []catalog.EntryRef `json:"returned,omitempty"`
	Error       string             `json:"error,omitempty"`
	Request     redriveRequest     `json:"request"`
	StartedAt   time.Time          `json:"started_at"`
	FinishedAt  *time.Time         `json:"finished_at,omitempty"`
}

func (j *job) snapshot() jobJSON {
	j.mu.Lock()
	defer j.mu.Unlock()
	v := j.v
	v.Sampled = append([]string(nil), v.Sampled...)
	v.Returned = append([]catalog.EntryRef(nil), v.Returned...)
	return v
}

// runJob runs a redrive job to its end.
func (s *Server) runJob(j *job, p catalog.StagedRedriveParams) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	j.mu.Lock()
	j.cancel = cancel
	j.mu.Unlock()
	p.OnStage = func(stage string, _ []string) {
		j.mu.Lock()
		j.v.Stage = stage
		j.mu.Unlock()
	}
	p.OnEntry = func(e catalog.EntryRef, outcome string) {
		j.mu.Lock()
		switch outcome {
		case catalog.OutcomeRedriven:
			j.v.Redriven++
		case catalog.OutcomeNeedsManual:
			j.v.NeedsManual++
		}
		j.v.Done++
		j.mu.Unlock()
		if s.o.Redrives != nil {
			s.o.Redrives.Redrive(e.Queue, outcome)
		}
	}
	res, err := s.o.Store.RedriveStaged(ctx, p)
	now := s.o.Now().UTC()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.v.FinishedAt, j.v.Stage = &now, ""
	j.v.Sampled, j.v.SampleClean, j.v.Returned = res.Sampled, res.SampleClean, res.Returned
	j.v.Redriven, j.v.NeedsManual = res.Total.Redriven, res.Total.NeedsManual
	j.v.Done = j.v.Redriven + j.v.NeedsManual
	switch {
	case err == nil:
		j.v.State = jobSucceeded
	case res.Stopped:
		j.v.State, j.v.Error = jobStopped, err.Error()
	case errors.Is(err, context.Canceled):
		j.v.State, j.v.Error = jobCancelled, "cancelled: "+err.Error()
	default:
		j.v.State, j.v.Error = jobFailed, err.Error()
	}
	if err != nil && !res.Stopped {
		j.v.Failed = res.Total.Selected - res.Total.Redriven - res.Total.NeedsManual
		if s.o.Redrives != nil && j.v.Failed > 0 && p.Filter.Queue != "" {
			for range j.v.Failed {
				s.o.Redrives.Redrive(p.Filter.Queue, catalog.OutcomeFailed)
			}
		}
	}
	s.o.Logger.Info("httpapi: redrive job ended", "job", j.v.ID, "op", j.v.Op, "actor", j.v.Actor, "state", j.v.State,
		"redriven", j.v.Redriven, "needs_manual", j.v.NeedsManual, "failed", j.v.Failed, "err", j.v.Error)
}

// jobs holds the redrive jobs of this process (the most recent 200).
type jobs struct {
	mu   sync.Mutex
	n    int
	byID map[string]*job
}

func newJobs() *jobs { return &jobs{byID: map[string]*job{}} }

const maxJobs = 200

func (js *jobs) add(j *job) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	js.n++
	j.v.ID = fmt.Sprintf("r%d-%s", js.n, randomHex(4))
	js.byID[j.v.ID] = j
	if len(js.byID) > maxJobs { // forget the oldest finished job
		var oldest *job
		for _, o := range js.byID {
			o.mu.Lock()
			done := o.v.State != jobRunning
			o.mu.Unlock()
			if done && (oldest == nil || o.v.StartedAt.Before(oldest.v.StartedAt)) {
				oldest = o
			}
		}
		if oldest != nil {
			delete(js.byID, oldest.v.ID)
		}
	}
	return j
}

func (js *jobs) get(id string) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.byID[id]
}

func (js *jobs) list() []jobJSON {
	js.mu.Lock()
	all := make([]*job, 0, len(js.byID))
	for _, j := range js.byID {
		all = append(all, j)
	}
	js.mu.Unlock()
	out := make([]jobJSON, len(all))
	for i, j := range all {
		out[i] = j.snapshot()
	}
	sort.Slice(out, func(a, b int) bool { return out[a].StartedAt.After(out[b].StartedAt) })
	return out
}

func (s *Server) handleJobs(w http.ResponseWriter, _ *http.Request, _ *principal) {
	writeJSON(w, http.StatusOK, map[string]any{"redrives": s.jobs.list()})
}

func (s *Server) handleJob(w http.ResponseWriter, r *http.Request, _ *principal) {
	j := s.jobs.get(r.PathValue("id"))
	if j == nil {
		writeError(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no redrive job %q in this process (jobs live in memory; GET /api/redrives lists them, the audit log keeps every redrive)", r.PathValue("id")), Field: "id"})
		return
	}
	writeJSON(w, http.StatusOK, j.snapshot())
}

// handleCancel stops a running job after its current batch; what was
// confirmed stays redriven, the rest stays pending.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request, _ *principal) {
	j := s.jobs.get(r.PathValue("id"))
	if j == nil {
		writeError(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no redrive job %q in this process", r.PathValue("id")), Field: "id"})
		return
	}
	j.mu.Lock()
	if j.cancel != nil {
		j.cancel()
	}
	j.mu.Unlock()
	writeJSON(w, http.StatusAccepted, j.snapshot())
}
