package httpapi

import (
	"bufio"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/entryview"
)

// handleSearch is 'lily dlq search TEXT --json': ?q= the text, the filter
// parameters (held entries unless ?state=; ?where= on JSON bodies),
// ?limit= (1..500, default 50) and ?after_id= to page on. A viewer
// without show_bodies gets the hits without snippets (a snippet may quote
// the redacted body).
func (s *Server) handleSearch(w http.ResponseWriter, r *http.Request, p *principal) {
	q := r.URL.Query()
	text := q.Get("q")
	if strings.TrimSpace(text) == "" {
		s.fail(w, r, badField("q", "q is required: the words to find in error messages and (redacted) bodies, e.g. ?q=timeout"))
		return
	}
	f, limit, err := s.pageFilter(q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	hits := []entryview.SearchHit{}
	err = s.o.Store.Search(r.Context(), catalog.SearchParams{Text: text, Filter: f, Limit: limit + 1}, func(h *catalog.SearchHit) error {
		hits = append(hits, entryview.NewSearchHit(h, p.bodies()))
		return nil
	})
	if errors.Is(err, catalog.ErrEmptySearch) {
		s.fail(w, r, badField("q", "q %q: %v", text, err))
		return
	}
	if errors.Is(err, catalog.ErrSearchTooLong) {
		s.fail(w, r, badField("q", "q: %v", err))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := map[string]any{"query": text}
	if len(hits) > limit {
		hits = hits[:limit]
		out["next_after_id"] = hits[limit-1].ID
	}
	out["entries"] = hits
	writeJSON(w, http.StatusOK, out)
}

// handleExport is 'lily dlq export': the entries of the filter (every
// state unless ?state=) as NDJSON (catalog.ExportLine per line), streamed.
// Bodies and headers are personal data: a viewer without show_bodies is
// refused (403, audited) unless it asks for ?omit_bodies=true, which
// leaves them out of every line.
func (s *Server) handleExport(w http.ResponseWriter, r *http.Request, p *principal) {
	q := r.URL.Query()
	fj, err := filterFromQuery(q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	f, err := fj.catalogFilter(s.o.Now(), nil)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	omit := false
	switch v := q.Get("omit_bodies"); v {
	case "", "false":
	case "true":
		omit = true
	default:
		s.fail(w, r, badField("omit_bodies", "omit_bodies %q: want true or false", v))
		return
	}
	if !omit && !p.bodies() {
		s.refuse(w, r, p, route{method: r.Method, path: r.URL.Path, perm: "export_bodies"},
			fmt.Sprintf("token %q has role viewer without show_bodies: exporting bodies and headers needs an operator, an admin or show_bodies = true; add omit_bodies=true to export without them", p.name), "role")
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Disposition", `attachment; filename="lily-dlq-export.ndjson"`)
	bw := bufio.NewWriterSize(w, 1<<16)
	if _, err := s.o.Store.Export(r.Context(), bw, catalog.ExportParams{Filter: f, OmitBodies: omit, Actor: p.name,
		Selector: fmt.Sprintf(`{"via":"api","filter":%s}`, f.String()), Now: s.o.Now}); err != nil {
		// The status line is gone: the stream ends early, and a reader
		// sees a truncated last line or fewer lines than expected.
		s.o.Logger.Error("httpapi: export", "actor", p.name, "err", err)
		return
	}
	_ = bw.Flush()
}

// handleImport is 'lily dlq import': the request body is an export
// (NDJSON), ?queue= puts every entry in that queue. Admin only: an import
// writes entries that can then be redriven. The answer is the
// catalog.ImportResult; a bad line is a 400 naming it (the batches before
// it are committed, and importing again skips them).
func (s *Server) handleImport(w http.ResponseWriter, r *http.Request, p *principal) {
	select {
	case s.imports <- struct{}{}:
		defer func() { <-s.imports }()
	default:
		w.Header().Set("Retry-After", "10")
		writeError(w, http.StatusTooManyRequests, apiError{Error: fmt.Sprintf(
			"%d imports are running, the most this server runs at once (Options.MaxImports): retry when one has finished", cap(s.imports))})
		return
	}
	q := r.URL.Query()
	ip := catalog.ImportParams{Queue: q.Get("queue"), Name: "request body", Actor: p.name, Now: s.o.Now, MaxLine: s.o.MaxImportLine}
	if len(s.o.Config.Queues) > 0 { // a configuration names the queues an entry may be imported into
		ip.Configured = func(name string) bool { _, ok := s.o.Config.Queue(name); return ok }
	}
	for _, m := range q["map"] {
		from, to, ok := strings.Cut(m, "=")
		if !ok || from == "" || to == "" {
			s.fail(w, r, badField("map", "map %q: want FROM=TO, a line's queue and the configured queue its entries go to", m))
			return
		}
		if ip.Map == nil {
			ip.Map = map[string]string{}
		}
		ip.Map[from] = to
	}
	res, err := s.o.Store.Import(r.Context(), r.Body, ip)
	if errors.Is(err, catalog.ErrImportLineTooLong) {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]any{"error": err.Error(), "field": "body", "max_line_bytes": s.o.MaxImportLine, "result": res})
		return
	}
	if errors.Is(err, catalog.ErrBadImport) {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error(), "field": "body", "result": res})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
