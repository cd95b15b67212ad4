package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/entryview"
	"github.com/lily-mq/lily/redrive"
)

// maxListed is the most entries a decision's answer lists.
const maxListed = 100

// decideAnswer is the answer of discard, erase and expire (and the
// listing part of a redrive dry run).
type decideAnswer struct {
	entryview.Decision
	Entries []catalog.EntryRef `json:"entries"`
	// Truncated is set when more entries were decided than listed.
	Truncated bool `json:"truncated"`
}

// lister collects the first maxListed entries of a decision.
type lister struct {
	entries   []catalog.EntryRef
	truncated bool
}

func (l *lister) add(e catalog.EntryRef) {
	if len(l.entries) < maxListed {
		l.entries = append(l.entries, e)
	} else {
		l.truncated = true
	}
}

func (l *lister) list() []catalog.EntryRef {
	if l.entries == nil {
		return []catalog.EntryRef{}
	}
	return l.entries
}

// discardRequest is POST /api/discard.
type discardRequest struct {
	Filter filterJSON `json:"filter"`
	Reason string     `json:"reason"`
	Limit  int        `json:"limit"`
	DryRun bool       `json:"dry_run"`
}

// handleDiscard is 'lily dlq discard': the held entries matching the
// filter leave the work list with a record (reason required).
func (s *Server) handleDiscard(w http.ResponseWriter, r *http.Request, p *principal) {
	var req discardRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if strings.TrimSpace(req.Reason) == "" {
		s.fail(w, r, badField("reason", `reason "": required: why these entries are dropped, kept with the record (e.g. "malformed bodies, cannot be fixed")`))
		return
	}
	if req.Limit < 0 {
		s.fail(w, r, badField("limit", "limit %d: must be >= 0 (0: all that match)", req.Limit))
		return
	}
	f, err := req.Filter.catalogFilter(s.o.Now(), nil)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, st := range f.States {
		if !st.IsHeld() {
			s.fail(w, r, badField("filter.state", "state %s: only held entries (pending, parked, needs_manual) can be discarded", st))
			return
		}
	}
	var l lister
	res, err := s.o.Store.Discard(r.Context(), catalog.DecideParams{Filter: f, Limit: req.Limit, DryRun: req.DryRun, Reason: req.Reason,
		Actor: p.name, OnEntry: l.add})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, decideAnswer{Decision: entryview.Decision{Op: res.Op, Action: catalog.ActionDiscard, DryRun: req.DryRun, Count: res.Count, Reason: req.Reason},
		Entries: l.list(), Truncated: l.truncated})
}

// eraseRequest is POST /api/erase: a data subject by key, entry IDs or
// event IDs.
type eraseRequest struct {
	Key      string   `json:"key"`
	IDs      []int64  `json:"ids"`
	EventIDs []string `json:"event_ids"`
	Reason   string   `json:"reason"`
	DryRun   bool     `json:"dry_run"`
}

// handleErase is 'lily dlq erase': bodies and headers removed, tombstones
// kept.
func (s *Server) handleErase(w http.ResponseWriter, r *http.Request, p *principal) {
	var req eraseRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Key == "" && len(req.IDs) == 0 && len(req.EventIDs) == 0 {
		s.fail(w, r, badField("key", "name the data subject: key, ids or event_ids (an erasure never sweeps the whole catalog)"))
		return
	}
	f, err := filterJSON{Key: req.Key, IDs: req.IDs, EventIDs: req.EventIDs}.catalogFilter(s.o.Now(), nil)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var l lister
	res, err := s.o.Store.Erase(r.Context(), catalog.DecideParams{Filter: f, DryRun: req.DryRun, Reason: req.Reason, Actor: p.name, OnEntry: l.add})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, decideAnswer{Decision: entryview.Decision{Op: res.Op, Action: catalog.ActionErase, DryRun: req.DryRun, Count: res.Count, Reason: req.Reason},
		Entries: l.list(), Truncated: l.truncated})
}

// expireRequest is POST /api/expire.
type expireRequest struct {
	Queues []string `json:"queues"`
	DryRun bool     `json:"dry_run"`
}

// handleExpire is 'lily dlq expire': held entries past their queue's
// dlq_retention_hours are discarded with a record.
func (s *Server) handleExpire(w http.ResponseWriter, r *http.Request, p *principal) {
	var req expireRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	var l lister
	res, err := s.o.Store.Expire(r.Context(), catalog.ExpireParams{Queues: req.Queues, Retention: s.retention, DryRun: req.DryRun,
		Actor: p.name, Now: s.o.Now, OnEntry: l.add})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, decideAnswer{Decision: entryview.Decision{Op: res.Op, Action: catalog.ActionExpire, DryRun: req.DryRun, Count: res.Count, ByQueue: res.ByQueue},
		Entries: l.list(), Truncated: l.truncated})
}

// Parker is what the parked routes need (ordering "park" and "block",
// docs/design.md §4): the held keys of a queue, and unparking one key. Without
// Options.Parker the server uses the catalog itself (redrive.Keys.HeldKeys and
// Keys.Unpark, redriving through Options.Target).
type Parker interface {
	// Parked lists the parked and blocked keys of queue, or of every queue
	// when queue is "".
	Parked(ctx context.Context, queue string) ([]ParkedKey, error)
	// Unpark lets key of queue move again: its head is redriven first,
	// then its parked messages follow in their original order. With dryRun
	// nothing changes and the plan is returned (and audited). A key that is
	// not held is an error wrapping redrive.ErrNotHeld.
	Unpark(ctx context.Context, queue, key string, dryRun bool, actor string) (UnparkResult, error)
}

// ParkedKey is one parked or blocked key of a queue.
type ParkedKey struct {
	Queue string `json:"queue"`
	Key   string `json:"key"`
	// Mode is the queue's ordering ("park" or "block"); State is "held"
	// (nothing passes) or "waiting" (one message is on its way).
	Mode  string `json:"mode"`
	State string `json:"state"`
	// Messages is how many messages of the key are parked behind its head.
	Messages int64 `json:"messages"`
	// ParkedAt is when the key was first held.
	ParkedAt time.Time `json:"parked_at"`
	// HeadEventID is the message whose failure holds the key; EntryID its
	// catalog entry (0 while it is not ingested from a broker yet).
	HeadEventID string `json:"head_event_id"`
	EntryID     int64  `json:"entry_id,omitempty"`
}

// UnparkResult is what an unpark did (or would do).
type UnparkResult struct {
	Op     string `json:"op"`
	Queue  string `json:"queue"`
	Key    string `json:"key"`
	DryRun bool   `json:"dry_run"`
	// Action is "redrive_head", "release_next", "await_head" or "nothing"
	// (redrive.UnparkResult).
	Action string `json:"action"`
	// Messages is how many messages move, in order: the head (when it is
	// redriven) and the parked ones behind it.
	Messages int64 `json:"messages"`
	// Redriven is how many were sent by this call (the rest follow one at
	// a time as the consumer processes them).
	Redriven int `json:"redriven"`
	// Free is set when nothing was parked and the key flows again.
	Free bool `json:"free"`
}

// catalogParker is the default Parker: the server's own catalog.
type catalogParker struct{ s *Server }

func (p catalogParker) Parked(ctx context.Context, queue string) ([]ParkedKey, error) {
	keys, err := redrive.NewKeys(p.s.o.Store).HeldKeys(ctx, queue)
	if err != nil {
		return nil, err
	}
	out := make([]ParkedKey, len(keys))
	for i, k := range keys {
		out[i] = ParkedKey{Queue: k.Queue, Key: k.Key, Mode: k.Mode, State: k.State, Messages: k.Parked,
			ParkedAt: k.Since, HeadEventID: k.HeadEventID}
		if k.Head != nil {
			out[i].EntryID = k.Head.ID
		}
	}
	return out, nil
}

func (p catalogParker) Unpark(ctx context.Context, queue, key string, dryRun bool, actor string) (UnparkResult, error) {
	if !dryRun && p.s.o.Target == nil {
		return UnparkResult{}, errNoTarget
	}
	res, err := redrive.NewKeys(p.s.o.Store).WithTracerProvider(p.s.o.TracerProvider).Unpark(ctx, redrive.UnparkParams{Queue: queue, Key: key, DryRun: dryRun,
		MaxRedrives: new(p.s.maxRedrives(queue)), Target: p.s.o.Target, Actor: actor})
	out := UnparkResult{Op: res.Op, Queue: queue, Key: key, DryRun: dryRun, Action: res.Action, Messages: res.Key.Parked, Free: res.Free}
	if res.Action == "redrive_head" {
		out.Messages++
	}
	if !dryRun && (res.Action == "redrive_head" || (res.Action == "release_next" && !res.Free)) {
		out.Redriven = 1
	}
	return out, err
}

// errNoTarget refuses a redrive or unpark when the server has no transport
// to publish with.
var errNoTarget = errors.New("this server has no transport to publish with (start lily serve with --config naming the queues' transports)")

func (s *Server) parker() Parker {
	if s.o.Parker != nil {
		return s.o.Parker
	}
	return catalogParker{s}
}

// handleParked lists parked keys (?queue= narrows).
func (s *Server) handleParked(w http.ResponseWriter, r *http.Request, _ *principal) {
	keys, err := s.parker().Parked(r.Context(), r.URL.Query().Get("queue"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if keys == nil {
		keys = []ParkedKey{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"parked": keys})
}

// unparkRequest is the optional body of the unpark route.
type unparkRequest struct {
	DryRun bool `json:"dry_run"`
}

// handleUnpark is 'lily dlq unpark': the key's parked messages are
// redriven in order.
func (s *Server) handleUnpark(w http.ResponseWriter, r *http.Request, p *principal) {
	var req unparkRequest
	if r.ContentLength != 0 {
		if err := decodeBody(r, &req); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	res, err := s.parker().Unpark(r.Context(), r.PathValue("queue"), r.PathValue("key"), req.DryRun, p.name)
	if errors.Is(err, catalog.ErrNotFound) || errors.Is(err, redrive.ErrNotHeld) {
		writeError(w, http.StatusNotFound, apiError{Error: err.Error(), Field: "key"})
		return
	}
	if errors.Is(err, errNoTarget) {
		writeError(w, http.StatusNotImplemented, apiError{Error: err.Error()})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
