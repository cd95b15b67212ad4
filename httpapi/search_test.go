package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/internal/entryview"
)

// raw sends a request and returns the status and the body.
func (f *fixture) raw(method, path string, tok *Token, body io.Reader) (int, []byte) {
	f.T.Helper()
	req, err := http.NewRequest(method, f.ts.URL+path, body)
	if err != nil {
		f.T.Fatal(err)
	}
	if tok != nil {
		req.Header.Set("Authorization", "Bearer "+tok.Secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.T.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func TestSearchAPI(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		f := mk(t, allTokens)
		var res struct {
			Entries []entryview.SearchHit `json:"entries"`
			Next    int64                 `json:"next_after_id"`
		}
		if code := f.call("GET", "/api/search?q="+url.QueryEscape("gateway timeout"), &operatorToken, nil, &res); code != 200 || len(res.Entries) != 4 {
			t.Fatalf("search: %d %+v", code, res)
		}
		if h := res.Entries[0]; h.Queue != "orders.created" || h.SnippetOmitted || len(h.Snippet) == 0 {
			t.Fatalf("operator hit: %+v", h)
		}
		// A viewer with show_bodies finds the same entries; search matches
		// body words, so a viewer without show_bodies may not search
		// (TestBodyOracle).
		reader := Token{Name: "rita", Role: config.RoleViewer, Secret: "reader-secret-0123456789", ShowBodies: true}
		g := mk(t, []Token{reader, operatorToken})
		res.Entries = nil
		if code := g.call("GET", "/api/search?q=gateway&limit=2", &reader, nil, &res); code != 200 || len(res.Entries) != 2 || res.Next == 0 ||
			res.Entries[0].SnippetOmitted || res.Entries[0].Snippet == nil {
			t.Fatalf("show_bodies viewer search: %d %+v", code, res)
		}
		// Bodies are searchable; ?where= narrows by a body field.
		res.Entries = nil
		if code := f.call("GET", "/api/search?q=order_id&where="+url.QueryEscape(`.amount_cents >= 1008`), &operatorToken, nil, &res); code != 200 || len(res.Entries) != 2 {
			t.Fatalf("search with where: %d %+v", code, res)
		}
		var e apiError
		if code := f.call("GET", "/api/search?q=%2C%2C", &operatorToken, nil, &e); code != 400 || e.Field != "q" {
			t.Fatalf("empty search: %d %+v", code, e)
		}
		if code := f.call("GET", "/api/entries?where="+url.QueryEscape(`.amount_cents > "x"`), &operatorToken, nil, &e); code != 400 || e.Field != "where" ||
			!strings.Contains(e.Error, "column 17: expected a number") {
			t.Fatalf("bad where: %d %+v", code, e)
		}
		var list struct {
			Entries []struct {
				EventID string `json:"event_id"`
			} `json:"entries"`
		}
		if code := g.call("GET", "/api/entries?where="+url.QueryEscape(`.order_id == "o-7"`), &reader, nil, &list); code != 200 ||
			len(list.Entries) != 1 || list.Entries[0].EventID != "orders-07" {
			t.Fatalf("entries with where: %d %+v", code, list)
		}
		f.Conserved()
		g.Conserved()
	})
}

// TestBodyOracle: a viewer whose bodies are masked cannot learn them
// through a where filter (bisecting .amount_cents with >=, confirming a
// guessed .order_id with ==) or a body-word search, on any route that
// takes them: each is 403, audited, and says what to do instead. The same
// viewer still reads the entries, groups and body-less export, and a
// viewer with show_bodies still filters.
func TestBodyOracle(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		f := mk(t, allTokens)
		probe := url.QueryEscape(`.amount_cents >= 1008`)
		guess := url.QueryEscape(`.order_id == "o-7"`)
		refused := []string{
			"/api/entries?where=" + probe,
			"/api/entries?ids=1&where=" + guess,
			"/api/groups?by=reason&where=" + probe,
			"/api/export?omit_bodies=true&where=" + guess,
			"/api/search?q=order_id",
			"/api/search?q=gateway&where=" + probe,
			"/api/search?q=gateway&state=all",
		}
		for i, path := range refused {
			code, b := f.raw("GET", path, &viewerToken, nil)
			var e apiError
			if err := json.Unmarshal(b, &e); code != http.StatusForbidden || err != nil || (e.Field != "where" && e.Field != "role") ||
				!strings.Contains(e.Error, "show_bodies") || strings.Contains(string(b), "orders-07") {
				t.Errorf("viewer GET %s: %d %s, want 403 naming show_bodies", path, code, b)
			}
			if n := countRefused(t, f, viewerToken.Name); n != i+1 {
				t.Errorf("after GET %s: %d refusals audited, want %d", path, n, i+1)
			}
		}
		// The audit record says what was attempted.
		var rec catalog.AuditRecord
		if err := f.Catalog.EachAudit(t.Context(), catalog.AuditFilter{Action: catalog.ActionRefused, Actor: viewerToken.Name, Newest: true, Limit: 1},
			func(r *catalog.AuditRecord) error { rec = *r; return nil }); err != nil || !strings.Contains(rec.Selector, `"attempted":"query_bodies"`) {
			t.Errorf("refusal record: %+v %v", rec, err)
		}
		// Without a body predicate the viewer reads as before.
		for _, path := range []string{"/api/entries?queue=orders.created", "/api/groups?by=reason", "/api/export?omit_bodies=true", "/api/entries?where="} {
			if code, b := f.raw("GET", path, &viewerToken, nil); code != http.StatusOK {
				t.Errorf("viewer GET %s: %d %s", path, code, b)
			}
		}
		// A viewer with show_bodies, an operator: the where filter works.
		reader := Token{Name: "rita", Role: config.RoleViewer, Secret: "reader-secret-0123456789", ShowBodies: true}
		g := mk(t, []Token{reader, operatorToken})
		for _, tok := range []*Token{&reader, &operatorToken} {
			var list struct {
				Entries []struct {
					EventID string `json:"event_id"`
				} `json:"entries"`
			}
			if code := g.call("GET", "/api/entries?where="+guess, tok, nil, &list); code != 200 || len(list.Entries) != 1 || list.Entries[0].EventID != "orders-07" {
				t.Errorf("%s: entries with where: %d %+v", tok.Name, code, list)
			}
		}
		f.Conserved()
		g.Conserved()
	})
}

func TestExportImportAPI(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, mk fixtureMaker) {
		t.Parallel()
		f := mk(t, allTokens)
		code, dump := f.raw("GET", "/api/export?queue=orders.created", &operatorToken, nil)
		if code != 200 || bytes.Count(dump, []byte("\n")) != 10 || !bytes.Contains(dump, []byte(`"format":"lily.dlq.export/v1"`)) {
			t.Fatalf("export: %d\n%s", code, dump)
		}
		// A viewer without show_bodies: refused, audited; with omit_bodies=true, no bodies.
		var e apiError
		if code := f.call("GET", "/api/export", &viewerToken, nil, &e); code != 403 || e.Field != "role" || !strings.Contains(e.Error, "omit_bodies=true") {
			t.Fatalf("viewer export: %d %+v", code, e)
		}
		if n := countRefused(t, f, viewerToken.Name); n != 1 {
			t.Fatalf("refusals of the viewer: %d", n)
		}
		code, thin := f.raw("GET", "/api/export?omit_bodies=true&queue=orders.created", &viewerToken, nil)
		if code != 200 || bytes.Count(thin, []byte("\n")) != 10 || bytes.Contains(thin, []byte("order_id")) || !bytes.Contains(thin, []byte(`"bodies_omitted":true`)) {
			t.Fatalf("viewer export with omit_bodies: %d\n%s", code, thin)
		}
		// A viewer allowed to see bodies may export them.
		reader := Token{Name: "rita", Role: config.RoleViewer, Secret: "reader-secret-0123456789", ShowBodies: true}
		g := mk(t, []Token{reader, adminToken, operatorToken}, withQueue("quarantine"))
		if code, b := g.raw("GET", "/api/export?queue=payments.captured", &reader, nil); code != 200 || bytes.Count(b, []byte("\n")) != 3 {
			t.Fatalf("show_bodies viewer export: %d\n%s", code, b)
		}
		// Import: admin only; into the same catalog every line is a duplicate.
		if code := f.call("POST", "/api/import", &operatorToken, nil, &e); code != 403 || e.Field != "role" {
			t.Fatalf("operator import: %d %+v", code, e)
		}
		var res catalog.ImportResult
		code, b := g.raw("POST", "/api/import?queue=quarantine", &adminToken, bytes.NewReader(dump))
		if err := json.Unmarshal(b, &res); code != 200 || err != nil || res.Added != 10 || res.Skipped != 0 {
			t.Fatalf("import: %d %s", code, b)
		}
		code, b = g.raw("POST", "/api/import?queue=quarantine", &adminToken, bytes.NewReader(dump))
		if err := json.Unmarshal(b, &res); code != 200 || err != nil || res.Added != 0 || res.Skipped != 10 {
			t.Fatalf("second import: %d %s", code, b)
		}
		code, b = g.raw("POST", "/api/import", &adminToken, bytes.NewReader(thin))
		if code != 400 || !bytes.Contains(b, []byte("line 1: bodies_omitted")) {
			t.Fatalf("import of an omitted export: %d %s", code, b)
		}
		// The quarantine copies carry the bodies byte for byte.
		var got []*catalog.Entry
		g.Catalog.Each(t.Context(), catalog.Filter{Queue: "quarantine"}, func(e *catalog.Entry) error { got = append(got, e); return nil })
		var want []*catalog.Entry
		f.Catalog.Each(t.Context(), catalog.Filter{Queue: "orders.created"}, func(e *catalog.Entry) error { want = append(want, e); return nil })
		if len(got) != 10 || len(want) != 10 {
			t.Fatalf("entries: %d %d", len(got), len(want))
		}
		for i := range got {
			if got[i].EventID != want[i].EventID || !bytes.Equal(got[i].Body, want[i].Body) || got[i].BodySHA256 != want[i].BodySHA256 {
				t.Fatalf("entry %d: %+v vs %+v", i, got[i], want[i])
			}
		}
		f.Conserved()
	})
}
