package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/internal/consoletest"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/lilyprom"
	"github.com/lily-mq/lily/transport"
)

// fixture is a server over a temporary SQLite catalog with dead letters of
// two queues, whose ledger balances (consoletest.Fixture).
type fixture struct {
	*consoletest.Fixture
	srv *Server
	ts  *httptest.Server
}

// The test tokens.
var (
	viewerToken   = Token{Name: "vera", Role: config.RoleViewer, Secret: "viewer-secret-0123456789"}
	operatorToken = Token{Name: "otto", Role: config.RoleOperator, Secret: "operator-secret-0123456789"}
	adminToken    = Token{Name: "ada", Role: config.RoleAdmin, Secret: "admin-secret-0123456789"}
	allTokens     = []Token{viewerToken, operatorToken, adminToken}
)

func newFixture(t testing.TB, tokens []Token, tweak ...func(*Options)) *fixture {
	t.Helper()
	return newFixtureOn(t, "sqlite", tokens, tweak...)
}

// fixtureMaker makes a fixture on one catalog store.
type fixtureMaker func(t testing.TB, tokens []Token, tweak ...func(*Options)) *fixture

// eachStore runs fn on a fixture over each catalog store: the SQLite file
// of the transport, and a PostgreSQL catalog (its own schema) beside a
// SQLite transport that stands for the broker.
func eachStore(t *testing.T, fn func(t *testing.T, mk fixtureMaker)) {
	for _, kind := range consoletest.Kinds {
		t.Run(kind, func(t *testing.T) {
			fn(t, func(t testing.TB, tokens []Token, tweak ...func(*Options)) *fixture {
				t.Helper()
				return newFixtureOn(t, kind, tokens, tweak...)
			})
		})
	}
}

func newFixtureOn(t testing.TB, kind string, tokens []Token, tweak ...func(*Options)) *fixture {
	t.Helper()
	cf := consoletest.New(t, kind)
	o := Options{Store: cf.Catalog, Config: cf.Config, Tokens: tokens, InFlight: cf.Transport, Logger: slog.New(slog.DiscardHandler),
		Target: cf.Target}
	for _, f := range tweak {
		f(&o)
	}
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{Fixture: cf, srv: srv, ts: cf.Serve(srv)}
}

// call makes a request with an optional bearer token and JSON body and
// decodes a JSON answer into out (if not nil); it returns the status.
func (f *fixture) call(method, path string, tok *Token, body any, out any) int {
	f.T.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			f.T.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, f.ts.URL+path, rd)
	if err != nil {
		f.T.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
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
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			f.T.Fatalf("%s %s: %d, not JSON: %v\n%s", method, path, resp.StatusCode, err, data)
		}
	}
	return resp.StatusCode
}

// waitJob polls a redrive job until it is no longer active.
func (f *fixture) waitJob(id int64, tok *Token) jobJSON {
	f.T.Helper()
	var j jobJSON
	waittest.Poller{Limit: time.Minute}.For(f.T, fmt.Sprintf("job %d to end", id), func() (bool, string) {
		j = jobJSON{}
		if code := f.call("GET", "/api/redrives/"+itoa(id), tok, nil, &j); code != http.StatusOK {
			f.T.Fatalf("GET job %d: %d", id, code)
		}
		return !j.State.Active(), fmt.Sprintf("%+v", j)
	})
	return j
}

func itoa(n int64) string { return fmt.Sprint(n) }

func readAll(t testing.TB, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func equalCounts(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// scrape renders a registry in the exposition format.
func scrape(t testing.TB, g prometheus.Gatherer) string {
	t.Helper()
	rec := httptest.NewRecorder()
	lilyprom.Handler(g).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// failing is a redrive target whose every publish fails.
type failing struct{}

func (failing) Publish(context.Context, *transport.PublishParams) error {
	return fmt.Errorf("broker said no")
}
