package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/entryview"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
)

// healthJSON is GET /healthz.
type healthJSON struct {
	// Status is "ok", "degraded" (a dead-letter queue holds entries or is
	// past its deadline, the broker refused dead-letter copies that are
	// held in the catalog only ("the DLQ is full: an operator must act"), a key is parked or blocked, or the ledger does
	// not balance: still serving,
	// HTTP 200) or "down" (the catalog cannot be read: HTTP 503).
	Status  string   `json:"status"`
	Reasons []string `json:"reasons"`
	// Paused lists the paused queues ('lily queue pause'): reported, not
	// a reason to degrade — an operator chose it.
	Paused []string `json:"paused,omitempty"`
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request, _ *principal) {
	now := s.o.Now()
	out := healthJSON{Status: "ok", Reasons: []string{}}
	stats, err := s.o.Store.Stats(r.Context(), now, s.retention)
	var rows []ledger.Row
	if err == nil {
		rows, err = ledger.New(s.o.Store).Rows(r.Context(), s.o.InFlight)
	}
	var keys []redrive.HeldKey
	if err == nil {
		keys, err = redrive.NewKeys(s.o.Store).HeldKeys(r.Context(), "")
	}
	var known map[string]int64 // held entries triaged known_issue: quiet
	if err == nil {
		known, err = s.o.Store.KnownIssueHeld(r.Context())
	}
	var refused map[string]int64 // held entries the broker's DLQ refused: loud, triaged or not
	if err == nil {
		refused, err = s.o.Store.RefusedHeld(r.Context())
	}
	var jobs []*redrive.Job // active jobs: an orphaned one holds its queue until someone acts
	if err == nil {
		jobs, err = redrive.New(s.o.Store).Jobs(r.Context(), redrive.JobQuery{Active: true})
	}
	var pauses []catalog.Pause
	if err == nil {
		pauses, err = s.o.Store.Pauses(r.Context())
	}
	if err != nil {
		s.o.Logger.Error("httpapi: health", "err", err)
		writeJSON(w, http.StatusServiceUnavailable, healthJSON{Status: "down", Reasons: []string{"catalog unreadable: " + err.Error()}})
		return
	}
	for _, row := range rows {
		if row.Lost != 0 {
			out.Reasons = append(out.Reasons, fmt.Sprintf("queue %s: the ledger does not balance: %d unaccounted for (run 'lily reconcile')", row.Queue, row.Lost))
		}
		if row.Unknown > 0 {
			out.Reasons = append(out.Reasons, fmt.Sprintf("queue %s: unknown — %d may be held by consumers in other processes; enable the management plugin (%s)", row.Queue, row.Unknown, row.UnknownWhy))
		}
	}
	for _, st := range stats {
		if n := refused[st.Queue]; n > 0 {
			out.Reasons = append(out.Reasons, fmt.Sprintf("queue %s: the DLQ is full: an operator must act — the broker refused the dead-letter copies of %d held dead letters, stored in the catalog only (header %s): drain or enlarge the broker's dead-letter queue, then decide them (lily dlq peek --queue %s)",
				st.Queue, n, evidence.HeaderDLQRefused, st.Queue))
		}
		switch {
		case st.Depth > 0 && !st.Deadline.IsZero() && !now.Before(st.Deadline):
			out.Reasons = append(out.Reasons, fmt.Sprintf("queue %s: %d dead letters, the oldest past its deadline %s (dlq_retention_hours): run 'lily dlq expire' or decide them",
				st.Queue, st.Depth, st.Deadline.Format(time.RFC3339)))
		case st.Depth > known[st.Queue]:
			reason := fmt.Sprintf("queue %s: %d dead letters held (oldest %s ago, deadline %s)",
				st.Queue, st.Depth-known[st.Queue], now.Sub(st.Oldest).Round(time.Second), st.Deadline.Format(time.RFC3339))
			if known[st.Queue] > 0 {
				reason += fmt.Sprintf(", besides %d of groups triaged known_issue", known[st.Queue])
			}
			out.Reasons = append(out.Reasons, reason)
		}
	}
	for _, k := range keys {
		out.Reasons = append(out.Reasons, fmt.Sprintf("queue %s: key %q %sed since %s, %d messages waiting behind its head (lily dlq parked)",
			k.Queue, k.Key, k.Mode, k.Since.Format(time.RFC3339), k.Parked))
	}
	for _, j := range jobs {
		if j.Orphaned {
			out.Reasons = append(out.Reasons, fmt.Sprintf("queue %s: redrive job %d is orphaned: no runner holds it (%d of %d handled; its runner stopped or died) and it holds the queue: 'lily dlq resume %d', a running 'lily serve', or 'lily dlq cancel %d'",
				j.Queue, j.ID, j.Done(), j.Total, j.ID, j.ID))
		}
	}
	if len(out.Reasons) > 0 {
		out.Status = "degraded"
	}
	out.Paused = pausedReasons(pauses)
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request, _ *principal) {
	if s.o.Metrics == nil {
		writeError(w, http.StatusNotFound, apiError{Error: "no metrics registry: this server was built without Options.Metrics"})
		return
	}
	s.o.Metrics.ServeHTTP(w, r)
}

// inflowBuckets is the number of bars of the inflow chart of /api/queues.
const inflowBuckets = 24

// queueJSON is one queue of GET /api/queues: 'lily dlq list --json' plus
// the transport, max_redrives, whether the deadline passed, and the inflow
// per bucket.
type queueJSON struct {
	entryview.Queue
	Transport    string `json:"transport"`
	PastDeadline bool   `json:"past_deadline"`
	MaxRedrives  int    `json:"max_redrives"`
	// Inflow counts dead letters per bucket of InflowBucketSeconds, oldest
	// first, the last ending now.
	Inflow              []int64 `json:"inflow"`
	InflowBucketSeconds int64   `json:"inflow_bucket_seconds"`
	// KnownIssue counts the held entries triaged known_issue (their own
	// status or their group's); Alarming the rest of the depth.
	KnownIssue int64 `json:"known_issue"`
	Alarming   int64 `json:"alarming"`
}

// handleQueues lists every queue of the catalog and the configuration.
// ?hours=N (1..720, default 24) sets the span of the inflow chart.
func (s *Server) handleQueues(w http.ResponseWriter, r *http.Request, _ *principal) {
	hours, err := intParam(r.URL.Query(), "hours", 24, 1, 720)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	now := s.o.Now()
	stats, err := s.o.Store.Stats(r.Context(), now, s.retention)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	seen := map[string]bool{}
	for _, st := range stats {
		seen[st.Queue] = true
	}
	for _, q := range s.o.Config.Queues { // configured queues with nothing yet
		if !seen[q.Name] {
			stats = append(stats, catalog.QueueStats{Queue: q.Name, Retention: s.retention(q.Name)})
		}
	}
	known, err := s.o.Store.KnownIssueHeld(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	bucket := time.Duration(hours) * time.Hour / inflowBuckets
	out := make([]queueJSON, 0, len(stats))
	for _, st := range stats {
		q := s.queue(st.Queue)
		row := queueJSON{Queue: entryview.NewQueue(st, q.Owner, now), Transport: q.Transport, MaxRedrives: q.Settings().MaxRedrives,
			InflowBucketSeconds: int64(bucket.Seconds()), PastDeadline: !st.Deadline.IsZero() && !now.Before(st.Deadline),
			KnownIssue: known[st.Queue], Alarming: max(0, st.Depth-known[st.Queue])}
		if row.Inflow, err = s.o.Store.Inflow(r.Context(), st.Queue, now, bucket, inflowBuckets); err != nil {
			s.fail(w, r, err)
			return
		}
		out = append(out, row)
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": out})
}

// handleLedger is 'lily reconcile --json'.
func (s *Server) handleLedger(w http.ResponseWriter, r *http.Request, _ *principal) {
	rows, err := ledger.New(s.o.Store).Rows(r.Context(), s.o.InFlight)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if rows == nil {
		rows = []ledger.Row{}
	}
	balanced := true
	for _, row := range rows {
		balanced = balanced && row.Balanced()
	}
	writeJSON(w, http.StatusOK, map[string]any{"queues": rows, "balanced": balanced})
}

// entrySummary is one entry of GET /api/entries: no body, no headers.
type entrySummary struct {
	ID              int64         `json:"id"`
	Queue           string        `json:"queue"`
	EventID         string        `json:"event_id"`
	Key             string        `json:"key,omitempty"`
	Type            string        `json:"type,omitempty"`
	State           catalog.State `json:"state"`
	Reason          string        `json:"reason"`
	ErrorType       string        `json:"error_type,omitempty"`
	ErrorMessage    string        `json:"error_message,omitempty"`
	Fingerprint     string        `json:"fingerprint,omitempty"`
	ConsumerVersion string        `json:"consumer_version,omitempty"`
	RedriveCount    int           `json:"redrive_count"`
	DeadLetteredAt  time.Time     `json:"dead_lettered_at"`
}

// pageFilter reads the filter of a paged listing with ?limit=N (1..500,
// default 50) and ?after_id= (the next_after_id of the previous page).
func (s *Server) pageFilter(q url.Values) (catalog.Filter, int, error) {
	f, err := s.queryFilter(q)
	if err != nil {
		return f, 0, err
	}
	limit, err := intParam(q, "limit", 50, 1, 500)
	if err != nil {
		return f, 0, err
	}
	after, err := intParam(q, "after_id", 0, 0, 1<<62)
	if err != nil {
		return f, 0, err
	}
	f.AfterID = int64(after)
	return f, limit, nil
}

// handleEntries lists entries matching the filter (held ones unless
// ?state=), ?limit=N (1..500, default 50) at a time; ?after_id= pages on
// (next_after_id of the answer).
func (s *Server) handleEntries(w http.ResponseWriter, r *http.Request, _ *principal) {
	q := r.URL.Query()
	f, limit, err := s.pageFilter(q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	es, err := s.o.Store.List(r.Context(), f, limit+1)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := map[string]any{}
	if len(es) > limit {
		es = es[:limit]
		out["next_after_id"] = es[limit-1].ID
	}
	rows := make([]entrySummary, len(es))
	for i, e := range es {
		rows[i] = entrySummary{ID: e.ID, Queue: e.Queue, EventID: e.EventID, Key: e.Key, Type: e.Type, State: e.State, Reason: e.Reason,
			ErrorType: e.ErrorType, ErrorMessage: e.ErrorMessage, Fingerprint: e.Fingerprint, ConsumerVersion: e.ConsumerVersion,
			RedriveCount: e.RedriveCount, DeadLetteredAt: e.DeadLetteredAt}
	}
	out["entries"] = rows
	writeJSON(w, http.StatusOK, out)
}

// handleEntry is 'lily dlq show ID --json': evidence decoded, headers,
// body as ?body=auto|text|json|hex. A viewer without show_bodies gets the
// body masked (format "masked", size kept).
func (s *Server) handleEntry(w http.ResponseWriter, r *http.Request, p *principal) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		s.fail(w, r, badField("id", "entry ID %q: entry IDs are positive integers, as /api/entries and /api/groups give them", r.PathValue("id")))
		return
	}
	format := r.URL.Query().Get("body")
	if format == "" {
		format = entryview.BodyAuto
	}
	if !entryview.ValidBodyFormat(format) {
		s.fail(w, r, badField("body", "body %q: must be auto, text, json or hex", format))
		return
	}
	e, ok := s.entry(w, r, id)
	if !ok {
		return
	}
	v := entryview.New(e, "catalog", format)
	if err := s.addVersions(r.Context(), &v, format, p); err != nil { // edit.go
		s.fail(w, r, err)
		return
	}
	if err := entryview.AddTriage(r.Context(), s.o.Store, &v, e); err != nil {
		s.fail(w, r, err)
		return
	}
	if !p.bodies() && v.Body.Format != "erased" && v.Body.Format != "empty" {
		v.Body = entryview.Body{Format: "masked", Size: v.Body.Size,
			Note: fmt.Sprintf("bodies are masked for token %q (role viewer): an operator, an admin or a viewer with show_bodies = true sees them", p.name)}
	}
	writeJSON(w, http.StatusOK, v)
}

// handleGroups is 'lily dlq group --json': ?by= one of the group columns
// (default reason) and the filter (held entries unless ?state=).
func (s *Server) handleGroups(w http.ResponseWriter, r *http.Request, _ *principal) {
	q := r.URL.Query()
	by := q.Get("by")
	if by == "" {
		by = "reason"
	}
	if err := oneOf("by", by, catalog.GroupColumns...); err != nil {
		s.fail(w, r, err)
		return
	}
	f, err := s.queryFilter(q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	groups, err := s.o.Store.Group(r.Context(), by, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if by == "fingerprint" {
		if err := s.o.Store.AttachGroupTriage(r.Context(), f.Queue, groups); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	if groups == nil {
		groups = []catalog.Group{}
	}
	var total int64
	for _, g := range groups {
		total += g.Count
	}
	writeJSON(w, http.StatusOK, map[string]any{"by": by, "total": total, "groups": groups})
}

// auditActions are the actions of the audit log.
var auditActions = []string{catalog.ActionRedrive, catalog.ActionDiscard, catalog.ActionErase, catalog.ActionExpire, catalog.ActionRefused, catalog.ActionTriage}

// handleAudit is 'lily audit --json', newest first: ?since= ?action=
// ?op= ?actor= ?event_id= (one message's history) ?limit= (1..1000,
// default 100).
func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request, _ *principal) {
	q := r.URL.Query()
	since, err := sinceParam(q, s.o.Now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := oneOf("action", q.Get("action"), auditActions...); err != nil {
		s.fail(w, r, err)
		return
	}
	limit, err := intParam(q, "limit", 100, 1, 1000)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f := catalog.AuditFilter{Since: since, Action: q.Get("action"), Op: q.Get("op"), Actor: q.Get("actor"), EventID: q.Get("event_id"),
		Newest: true, Limit: limit}
	records := []catalog.AuditRecord{}
	err = s.o.Store.EachAudit(r.Context(), f, func(rec *catalog.AuditRecord) error {
		records = append(records, *rec)
		return nil
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"records": records})
}
