package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/internal/entryview"
)

// editRequest is POST /api/entries/{id}/edit: the new body (text in body,
// or any bytes in body_base64), why, and the entry ID typed again.
type editRequest struct {
	Body       *string `json:"body"`
	BodyBase64 *string `json:"body_base64"`
	Reason     string  `json:"reason"`
	// Confirm must repeat the entry ID: the console asks the operator to
	// type it, so that an edit is never one click.
	Confirm string `json:"confirm"`
	// DryRun checks the body and returns the diff; nothing is stored.
	DryRun bool `json:"dry_run"`
}

// editVersion names one body version by hash and size.
type editVersion struct {
	Version    int    `json:"version"`
	BodySHA256 string `json:"body_sha256"`
	BodySize   int64  `json:"body_size"`
}

// editAnswer is the answer of POST /api/entries/{id}/edit.
type editAnswer struct {
	Op       string           `json:"op,omitempty"`
	DryRun   bool             `json:"dry_run"`
	Entry    catalog.EntryRef `json:"entry"`
	Version  int              `json:"version"`
	EditedBy string           `json:"edited_by"`
	Reason   string           `json:"reason"`
	Previous editVersion      `json:"previous"`
	Current  editVersion      `json:"current"`
	Diff     string           `json:"diff"`
}

// handleEdit is 'lily dlq edit': a new version of an entry's body. Only an
// editor of the entry's queue may (the token's edit_queues; a role alone
// never allows it): anyone else is refused with 403, audited.
func (s *Server) handleEdit(w http.ResponseWriter, r *http.Request, p *principal) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		s.fail(w, r, badField("id", "entry ID %q: entry IDs are positive integers, as /api/entries gives them", r.PathValue("id")))
		return
	}
	var req editRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	e, ok := s.entry(w, r, id)
	if !ok {
		return
	}
	if !config.EditAllowed(p.editQueues, e.Queue) {
		why := fmt.Sprintf("token %q (role %s) may not edit entries of queue %s: only a [[token]] whose edit_queues lists it (or \"*\") may; a role alone never does",
			p.name, p.role, e.Queue)
		if s.local() {
			why = "edits need an editor: configure a [[token]] with edit_queues (no token edits in local mode)"
		}
		s.refuse(w, r, p, route{perm: permEdit}, why, "edit_queues")
		return
	}
	body, err := req.body()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	switch {
	case strings.TrimSpace(req.Confirm) != strconv.FormatInt(id, 10):
		s.fail(w, r, badField("confirm", "confirm %q: type the entry ID (%d) to confirm the edit", req.Confirm, id))
		return
	case strings.TrimSpace(req.Reason) == "":
		s.fail(w, r, badField("reason", `reason "": required: why the body is changed, kept with the version (e.g. "total sent as a string")`))
		return
	}
	ct := s.queue(e.Queue).ContentType
	if err := catalog.CheckBody(ct, body); err != nil {
		s.fail(w, r, badField("body", "%v; fix the body", err))
		return
	}
	if req.DryRun {
		s.previewEdit(w, r, p, e, body, req.Reason)
		return
	}
	res, err := s.o.Store.Edit(r.Context(), catalog.EditParams{ID: id, Body: body, Reason: req.Reason, ContentType: ct, Actor: p.name})
	switch {
	case errors.Is(err, catalog.ErrNotEditable):
		writeError(w, http.StatusConflict, apiError{Error: err.Error(), Field: "id"})
		return
	case errors.Is(err, catalog.ErrSameBody):
		s.fail(w, r, badField("body", "%v", err))
		return
	case err != nil:
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, editAnswer{Op: res.Op, Entry: res.Entry, Version: res.Version, EditedBy: res.Current.EditedBy, Reason: req.Reason,
		Previous: editVersion{res.Previous.Version, res.Previous.BodySHA256, res.Previous.BodySize},
		Current:  editVersion{res.Current.Version, res.Current.BodySHA256, res.Current.BodySize},
		Diff:     entryview.Diff(res.Previous.Version, res.Previous.Body, res.Current.Version, res.Current.Body)})
}

// previewEdit answers a dry run: the diff from the latest version.
func (s *Server) previewEdit(w http.ResponseWriter, r *http.Request, p *principal, e *catalog.Entry, body []byte, reason string) {
	vs, err := s.o.Store.Versions(r.Context(), e.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	last := vs[len(vs)-1]
	cur := editVersion{Version: last.Version + 1, BodySHA256: sha256Hex(body), BodySize: int64(len(body))}
	writeJSON(w, http.StatusOK, editAnswer{DryRun: true, Entry: catalog.EntryRef{ID: e.ID, Queue: e.Queue, EventID: e.EventID, State: e.State,
		RedriveCount: e.RedriveCount, DeadLetteredAt: e.DeadLetteredAt}, Version: cur.Version, EditedBy: p.name, Reason: reason,
		Previous: editVersion{last.Version, last.BodySHA256, last.BodySize}, Current: cur,
		Diff: entryview.Diff(last.Version, last.Body, cur.Version, body)})
}

// body returns the request's new body.
func (req editRequest) body() ([]byte, error) {
	switch {
	case req.Body != nil && req.BodyBase64 != nil:
		return nil, badField("body", "give body (text) or body_base64 (any bytes), not both")
	case req.Body != nil:
		return []byte(*req.Body), nil
	case req.BodyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*req.BodyBase64)
		if err != nil {
			return nil, badField("body_base64", "body_base64: %v (standard base64 with padding)", err)
		}
		return b, nil
	}
	return nil, badField("body", "body is required: the corrected body as text (or body_base64 for binary bodies)")
}

// addVersions adds an edited entry's versions to its view (GET
// /api/entries/{id}); a principal who may not see bodies gets them masked,
// their diffs too.
func (s *Server) addVersions(ctx context.Context, v *entryview.Entry, format string, p *principal) error {
	vs, err := s.o.Store.Versions(ctx, v.ID)
	if err != nil || len(vs) < 2 {
		return err
	}
	v.Versions = entryview.Versions(vs, format)
	if !p.bodies() {
		for i := range v.Versions {
			ver := &v.Versions[i]
			if ver.Body.Format != "erased" && ver.Body.Format != "empty" {
				ver.Body = entryview.Body{Format: "masked", Size: ver.Body.Size}
			}
			if ver.Diff != "" {
				ver.Diff = "(masked: bodies are hidden for this token)"
			}
		}
	}
	return nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// entry reads the entry with the ID, or answers 404 (or the error) and
// reports false.
func (s *Server) entry(w http.ResponseWriter, r *http.Request, id int64) (*catalog.Entry, bool) {
	e, err := s.o.Store.Get(r.Context(), id)
	if errors.Is(err, catalog.ErrNotFound) {
		writeError(w, http.StatusNotFound, apiError{Error: fmt.Sprintf("no entry %d in the catalog (list entries with GET /api/entries)", id), Field: "id"})
		return nil, false
	}
	if err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	return e, true
}
