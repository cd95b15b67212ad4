package httpapi

import (
	"errors"
	"net/http"
	"reflect"

	"github.com/lily-mq/lily/catalog"
)

// triageRequest is POST /api/triage: 'lily dlq triage' as JSON. It names
// either entries (filter, with limit) or a group (queue and fingerprint;
// without a queue, the group in every queue that has the fingerprint).
// assign, status and ticket, when present, are set ("" clears); note is
// appended to the history.
type triageRequest struct {
	Filter *filterJSON       `json:"filter"`
	Limit  int               `json:"limit"`
	Group  *catalog.GroupKey `json:"group"`
	Assign *string           `json:"assign"`
	Status *string           `json:"status"`
	Ticket *string           `json:"ticket"`
	Note   string            `json:"note"`
}

// triageAnswer is the answer of POST /api/triage.
type triageAnswer struct {
	Op string `json:"op"`
	// Target is "entries" or "group".
	Target string `json:"target"`
	// Count is the entries triaged; for a group, the entries it holds now
	// (later ones inherit its status).
	Count     int                `json:"count"`
	Groups    []catalog.GroupKey `json:"groups"`
	Entries   []catalog.EntryRef `json:"entries"`
	Truncated bool               `json:"truncated"`
}

// handleTriage sets the triage of entries or of a group; every change is
// audited (action triage). Viewers are refused (403, audited) by the
// route's permission.
func (s *Server) handleTriage(w http.ResponseWriter, r *http.Request, p *principal) {
	var req triageRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	ch := catalog.TriageChange{Assignee: req.Assign, Status: req.Status, Ticket: req.Ticket, Note: req.Note}
	if err := ch.Validate(); err != nil {
		s.fail(w, r, triageField(err))
		return
	}
	switch {
	case (req.Filter == nil) == (req.Group == nil):
		s.fail(w, r, badField("filter", "name what to triage: filter (entries, e.g. {\"ids\":[42]}) or group ({\"queue\":Q,\"fingerprint\":F}), not both"))
		return
	case req.Limit < 0:
		s.fail(w, r, badField("limit", "limit %d: must be >= 0 (0: all that match)", req.Limit))
		return
	}
	if req.Group != nil {
		res, err := s.o.Store.TriageGroup(r.Context(), catalog.TriageGroupParams{Queue: req.Group.Queue, Fingerprint: req.Group.Fingerprint,
			Change: ch, Actor: p.name})
		if err != nil {
			if errors.Is(err, catalog.ErrNoGroup) {
				err = badField("group.queue", "%v", err)
			}
			s.fail(w, r, triageField(err))
			return
		}
		writeJSON(w, http.StatusOK, triageAnswer{Op: res.Op, Target: "group", Count: res.Count, Groups: res.Groups, Entries: []catalog.EntryRef{}})
		return
	}
	if reflect.ValueOf(*req.Filter).IsZero() {
		s.fail(w, r, badField("filter", "filter {}: name the entries (ids, queue, reason, ...): a triage never sweeps the whole catalog"))
		return
	}
	f, err := req.Filter.catalogFilter(s.o.Now(), catalog.HeldStates)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var l lister
	res, err := s.o.Store.TriageEntries(r.Context(), catalog.TriageParams{Filter: f, Limit: req.Limit, Change: ch, Actor: p.name, OnEntry: l.add})
	if err != nil {
		s.fail(w, r, triageField(err))
		return
	}
	writeJSON(w, http.StatusOK, triageAnswer{Op: res.Op, Target: "entries", Count: res.Count, Groups: res.Groups, Entries: l.list(), Truncated: l.truncated})
}

// triageField turns a catalog.TriageError into a 400 naming its field.
func triageField(err error) error {
	var te *catalog.TriageError
	if errors.As(err, &te) {
		return badField(te.Field, "%s", te.Msg)
	}
	return err
}
