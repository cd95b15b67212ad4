package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
)

// roleCase is one route of the role matrix: a request and the least role
// that may make it (dry runs, so that what is allowed changes nothing
// either).
type roleCase struct {
	method, path string
	body         any
	least        string // "" = public
}

// editorRoutes need more than their least role: the token's edit_queues
// must cover the entry's queue (edit.go); no token of the matrix has any.
var editorRoutes = map[string]bool{"POST /api/entries/{id}/edit": true}

func roleCases() []roleCase {
	dry := map[string]any{"dry_run": true}
	return []roleCase{
		{"GET", "/healthz", nil, ""},
		{"GET", "/metrics", nil, ""},
		{"GET", "/api/openapi.json", nil, ""},
		{"POST", "/login", nil, ""},
		{"POST", "/logout", nil, ""},
		{"GET", "/api/session", nil, config.RoleViewer},
		{"GET", "/api/queues", nil, config.RoleViewer},
		{"GET", "/api/ledger", nil, config.RoleViewer},
		{"GET", "/api/timeline", nil, config.RoleViewer},
		{"GET", "/api/entries", nil, config.RoleViewer},
		{"GET", "/api/entries/{id}", nil, config.RoleViewer},
		{"GET", "/api/groups", nil, config.RoleViewer},
		{"GET", "/api/audit", nil, config.RoleViewer},
		{"GET", "/api/redrives", nil, config.RoleViewer},
		{"GET", "/api/redrives/{id}", nil, config.RoleViewer},
		{"GET", "/api/parked", nil, config.RoleViewer},
		{"POST", "/api/redrives", dry, config.RoleOperator},
		{"POST", "/api/redrives/{id}/cancel", nil, config.RoleOperator},
		{"POST", "/api/discard", map[string]any{"dry_run": true, "reason": "r"}, config.RoleOperator},
		{"POST", "/api/queues/{queue}/parked/{key}/unpark", dry, config.RoleOperator},
		{"POST", "/api/erase", map[string]any{"dry_run": true, "key": "customer-1"}, config.RoleAdmin},
		{"POST", "/api/expire", dry, config.RoleAdmin},
		{"GET", "/api/rules", nil, config.RoleViewer},
		{"POST", "/api/entries/{id}/edit", map[string]any{"body": "{}", "reason": "r", "confirm": "1", "dry_run": true}, config.RoleOperator},
		{"POST", "/api/triage", map[string]any{"filter": map[string]any{"ids": []int{1}}, "note": "looked at it"}, config.RoleOperator},
		{"GET", "/api/search", nil, config.RoleOperator}, // a viewer only with show_bodies (TestBodyOracle)
		{"GET", "/api/export", nil, config.RoleOperator}, // a viewer only with omit_bodies=true (search_test.go)
		{"POST", "/api/import", nil, config.RoleAdmin},
		{"GET", "/api/consumers", nil, config.RoleViewer},
		{"POST", "/api/queues/{queue}/pause", map[string]any{"reason": "r"}, config.RoleOperator},
		{"POST", "/api/queues/{queue}/resume", nil, config.RoleOperator},
	}
}

// TestRoleMatrix proves that each role is refused what it may not do:
// 403, nothing changed, and an audit record of the refusal under the
// token's name; and that it may do the rest. Every registered route is in
// the matrix.
func TestRoleMatrix(t *testing.T) {
	t.Parallel()
	f := newFixture(t, allTokens, func(o *Options) { o.Parker = &fakeParker{} })
	cases := roleCases()
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.method+" "+c.path] = true
	}
	for _, rt := range f.srv.Routes() {
		if !covered[rt.Method+" "+rt.Path] {
			t.Errorf("route %s %s is not in the role matrix", rt.Method, rt.Path)
		}
	}
	concrete := strings.NewReplacer("{id}", "1", "{queue}", "orders.created", "{key}", "customer-1")
	for _, c := range cases {
		for _, tok := range allTokens {
			path := concrete.Replace(c.path)
			before := f.States()
			refusedBefore := countRefused(t, f, tok.Name)
			var e apiError
			code := f.call(c.method, path, &tok, c.body, nil)
			want := c.least == "" || roleRank[tok.Role] >= roleRank[c.least]
			switch {
			case want && editorRoutes[c.method+" "+c.path]: // allowed by role, refused for edit_queues
				code = f.call(c.method, path, &tok, c.body, &e)
				if code != http.StatusForbidden || e.Field != "edit_queues" {
					t.Errorf("%s (%s) %s %s: %d %+v, want 403 for edit_queues", tok.Name, tok.Role, c.method, path, code, e)
				}
				if n := countRefused(t, f, tok.Name); n != refusedBefore+2 {
					t.Errorf("%s %s by %s: %d refusal records, want %d", c.method, path, tok.Name, n, refusedBefore+2)
				}
			case want && (code == http.StatusForbidden || code == http.StatusUnauthorized):
				t.Errorf("%s (%s) %s %s: %d, want it allowed", tok.Name, tok.Role, c.method, path, code)
			case !want:
				code = f.call(c.method, path, &tok, c.body, &e)
				if code != http.StatusForbidden || e.Field != "role" || !strings.Contains(e.Error, tok.Role) {
					t.Errorf("%s (%s) %s %s: %d %+v, want 403 naming the role", tok.Name, tok.Role, c.method, path, code, e)
				}
				if after := f.States(); !equalCounts(before, after) {
					t.Errorf("%s %s refused but the catalog changed: %v -> %v", c.method, path, before, after)
				}
				if n := countRefused(t, f, tok.Name); n != refusedBefore+2 {
					t.Errorf("%s %s by %s: %d refusal records, want %d", c.method, path, tok.Name, n, refusedBefore+2)
				}
			}
		}
	}
	// Unauthenticated and unknown tokens: 401, nothing to audit.
	for _, tok := range []*Token{nil, {Name: "mallory", Secret: "not-a-known-secret-0000"}} {
		var e apiError
		if code := f.call("POST", "/api/discard", tok, map[string]any{"reason": "x"}, &e); code != http.StatusUnauthorized || e.Field != "Authorization" {
			t.Errorf("token %v: %d %+v, want 401", tok, code, e)
		}
	}
	f.Conserved()
}

func countRefused(t *testing.T, f *fixture, actor string) int {
	t.Helper()
	n := 0
	err := f.Catalog.EachAudit(t.Context(), catalog.AuditFilter{Action: catalog.ActionRefused, Actor: actor}, func(r *catalog.AuditRecord) error {
		if r.Outcome != catalog.OutcomeForbidden || !strings.Contains(r.Selector, `"attempted"`) {
			t.Errorf("refusal record %+v", r)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// browser is an HTTP client with a cookie jar, as the console is.
func browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// post sends a JSON POST from the console's origin with the given extra
// headers.
func post(t *testing.T, c *http.Client, u, body string, hdr map[string]string) (int, apiError) {
	t.Helper()
	req, _ := http.NewRequest("POST", u, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e apiError
	_ = json.Unmarshal([]byte(readAll(t, resp)), &e)
	return resp.StatusCode, e
}

func sessionOf(t *testing.T, c *http.Client, base string) sessionJSON {
	t.Helper()
	resp, err := c.Get(base + "/api/session")
	if err != nil {
		t.Fatal(err)
	}
	var s sessionJSON
	if err := json.Unmarshal([]byte(readAll(t, resp)), &s); err != nil || resp.StatusCode != 200 {
		t.Fatalf("session: %d %v", resp.StatusCode, err)
	}
	return s
}

func TestConsoleLoginAndCSRF(t *testing.T) {
	t.Parallel()
	f := newFixture(t, allTokens)
	c := browser(t)
	same := map[string]string{"Origin": f.ts.URL, "Sec-Fetch-Site": "same-origin"}

	// A wrong token does not log in.
	resp, err := c.PostForm(f.ts.URL+"/login", url.Values{"token": {"wrong-secret-0123456789"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/?login=failed" {
		t.Errorf("bad login: %d %q", resp.StatusCode, loc)
	}
	// A login from another site is refused.
	req, _ := http.NewRequest("POST", f.ts.URL+"/login", strings.NewReader("token="+operatorToken.Secret))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	if resp, err = c.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site login: %v %d", err, resp.StatusCode)
	}
	resp.Body.Close()
	// The operator logs in: an HttpOnly, SameSite=Strict cookie.
	resp, err = c.PostForm(f.ts.URL+"/login", url.Values{"token": {operatorToken.Secret}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ck := resp.Header.Get("Set-Cookie")
	if !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Strict") {
		t.Errorf("session cookie %q", ck)
	}
	sess := sessionOf(t, c, f.ts.URL)
	if sess.Name != "otto" || sess.Role != "operator" || sess.CSRFToken == "" {
		t.Fatalf("session = %+v", sess)
	}

	discard := `{"filter":{"queue":"orders.created","reason":"permanent"},"reason":"malformed","limit":1}`
	before := f.States()
	for name, hdr := range map[string]map[string]string{
		"no token":         same,
		"wrong token":      {"Origin": f.ts.URL, csrfHeader: "0000"},
		"other origin":     {"Origin": "https://evil.example", csrfHeader: sess.CSRFToken},
		"cross-site fetch": {"Sec-Fetch-Site": "cross-site", csrfHeader: sess.CSRFToken},
	} {
		if code, e := post(t, c, f.ts.URL+"/api/discard", discard, hdr); code != http.StatusForbidden || !strings.Contains(e.Error, "csrf") {
			t.Errorf("%s: %d %+v, want 403 csrf", name, code, e)
		}
	}
	if after := f.States(); !equalCounts(before, after) {
		t.Fatalf("a refused form changed the catalog: %v -> %v", before, after)
	}
	if n := countRefused(t, f, "otto"); n != 4 {
		t.Errorf("%d refusal records for otto, want 4", n)
	}
	// A native form POST (no JavaScript, so no header) without the token.
	resp, err = c.PostForm(f.ts.URL+"/api/discard", url.Values{"reason": {"x"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("form POST without a CSRF token: %d, want 403", resp.StatusCode)
	}
	hdr := map[string]string{"Origin": f.ts.URL, "Sec-Fetch-Site": "same-origin", csrfHeader: sess.CSRFToken}
	if code, e := post(t, c, f.ts.URL+"/api/discard", discard, hdr); code != http.StatusOK {
		t.Errorf("with the CSRF token: %d %+v", code, e)
	}
	// The operator may not erase, even with a good CSRF token.
	if code, e := post(t, c, f.ts.URL+"/api/erase", `{"key":"customer-1"}`, hdr); code != http.StatusForbidden || e.Field != "role" {
		t.Errorf("operator erase: %d %+v", code, e)
	}
	// Logout needs the token too, then the session is gone.
	resp, err = c.PostForm(f.ts.URL+"/logout", url.Values{"csrf_token": {sess.CSRFToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp, err = c.Get(f.ts.URL + "/api/session"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("after logout: %v %d", err, resp.StatusCode)
	}
	resp.Body.Close()
	f.Conserved()
}

func TestLocalMode(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	// Non-browser clients act as "local" (admin).
	var ans decideAnswer
	if code := f.call("POST", "/api/erase", nil, map[string]any{"key": "customer-2", "dry_run": true}, &ans); code != 200 {
		t.Errorf("local erase: %d", code)
	}
	// A browser request without the console's session is refused.
	c := browser(t)
	if code, e := post(t, c, f.ts.URL+"/api/discard", `{"reason":"x"}`, map[string]string{"Origin": "https://evil.example"}); code != http.StatusForbidden {
		t.Errorf("cross-site POST in local mode: %d %+v", code, e)
	}
	// Opening the console starts a local session with a CSRF token.
	resp, err := c.Get(f.ts.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(t, resp)
	if !strings.Contains(page, "<title>") || resp.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("console page: %d %q", resp.StatusCode, page[:min(len(page), 80)])
	}
	sess := sessionOf(t, c, f.ts.URL)
	if sess.Name != LocalActor || sess.Role != config.RoleAdmin || !sess.Local || sess.CSRFToken == "" {
		t.Errorf("local session %+v", sess)
	}
	hdr := map[string]string{"Origin": f.ts.URL, csrfHeader: sess.CSRFToken}
	if code, e := post(t, c, f.ts.URL+"/api/discard", `{"reason":"x","dry_run":true}`, hdr); code != 200 {
		t.Errorf("console POST in local mode: %d %+v", code, e)
	}
	// Another host name (DNS rebinding) is refused.
	req, _ := http.NewRequest("GET", f.ts.URL+"/api/queues", nil)
	req.Host = "attacker.example:8080"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("foreign Host in local mode: %d", resp.StatusCode)
	}
	f.Conserved()
}

func TestTokens(t *testing.T) {
	t.Parallel()
	ts, err := ParseTokenList("ci:operator:abcdefghijklmnop:with:colons, ro:viewer:0123456789abcdef")
	if err != nil || len(ts) != 2 || ts[0].Secret != "abcdefghijklmnop:with:colons" || ts[1].Role != "viewer" {
		t.Fatalf("ParseTokenList = %+v, %v", ts, err)
	}
	if _, err := ParseTokenList("justname"); err == nil || !strings.Contains(err.Error(), "name:role:secret") {
		t.Errorf("bad item: %v", err)
	}
	cfg := config.Config{Tokens: []config.TokenConfig{{Name: "alice", Role: "admin", SecretEnv: "ALICE"}}}
	env := map[string]string{"ALICE": "alice-secret-0123456789", TokensEnv: "bob:viewer:bob-secret-0123456789"}
	got, err := TokensFromConfig(cfg, func(k string) string { return env[k] })
	if err != nil || len(got) != 2 || got[0].Name != "alice" || got[1].Name != "bob" {
		t.Fatalf("TokensFromConfig = %+v, %v", got, err)
	}
	env[TokensEnv] = "alice:root:short"
	_, err = TokensFromConfig(cfg, func(k string) string { return env[k] })
	for _, want := range []string{`"alice" is used twice`, `role "root"`, "at least 16"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
	if _, err := New(Options{Store: nil}); err == nil {
		t.Error("New without a Store: no error")
	}
}

func TestLoopbackAddr(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:80": true, "[::1]:8080": true, "127.0.0.2:1": true,
		":8080": false, "0.0.0.0:8080": false, "10.0.0.5:8080": false, "example.com:80": false, "nonsense": false,
	} {
		if got := LoopbackAddr(addr); got != want {
			t.Errorf("LoopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}
