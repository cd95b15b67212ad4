package httpapi

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/lilyprom"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// fixture is a server over a temporary SQLite catalog with dead letters of
// two queues, whose ledger balances.
type fixture struct {
	t   testing.TB
	tr  *sqlite.Transport
	cat *catalog.Store
	// broker is what publishes and consumes: tr itself on SQLite, tr
	// accounted in the PostgreSQL catalog's ledger otherwise.
	broker transport.Transport
	srv    *Server
	ts     *httptest.Server
}

// testConfig configures the fixture's queues.
func testConfig() config.Config {
	return config.Config{Queues: []lily.QueueConfig{
		{Name: "orders.created", Owner: "team-checkout", RetryAttempts: 3, DLQRetentionHours: new(72)},
		{Name: "payments.captured", Owner: "team-payments", MaxRedrives: new(1)},
	}}.WithDefaults()
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
	for _, kind := range []string{"sqlite", "postgres"} {
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
	ctx := context.Background()
	tr, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lily.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	var cat *catalog.Store
	if kind == "postgres" {
		cat, err = catalog.OpenPostgres(ctx, pgtest.URL(t))
		if err == nil {
			t.Cleanup(func() { cat.Close() })
		}
	} else {
		cat, err = catalog.New(ctx, tr.DB())
	}
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	var specs []transport.QueueSpec
	for _, q := range cfg.Queues {
		specs = append(specs, q.Spec())
	}
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: specs}); err != nil {
		t.Fatal(err)
	}
	seedCatalog(t, tr.DB(), cat, time.Now())
	var broker transport.Transport = tr
	if kind == "postgres" {
		// A broker's consumers count in the catalog's ledger: each
		// message once, by identity, as lily.Publish recorded it.
		broker = catalog.Account(tr, cat)
		err := cat.Each(ctx, catalog.Filter{}, func(e *catalog.Entry) error {
			_, err := cat.DB().ExecContext(ctx, `INSERT INTO lily_ledger_events(queue, kind, event_id, at) VALUES ($1, 'accepted', $2, $3)`,
				e.Queue, e.EventID, e.DeadLetteredAt.UnixMilli())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	o := Options{Store: cat, Config: cfg, Tokens: tokens, InFlight: tr, Logger: slog.New(slog.DiscardHandler),
		Target: func(context.Context, string) (catalog.Publisher, error) { return broker, nil }}
	for _, f := range tweak {
		f(&o)
	}
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	return &fixture{t: t, tr: tr, cat: cat, srv: srv, ts: ts, broker: broker}
}

// seedCatalog adds the dead letters: in orders.created 6 malformed bodies
// (permanent), 4 gateway timeouts (retries_exhausted, one of them already
// redriven twice); in payments.captured 3 broker dead letters with x-death
// (delivery_limit). Each is counted accepted in the ledger, so that it
// balances: accepted = dead-lettered.
func seedCatalog(t testing.TB, db *sql.DB, cat *catalog.Store, now time.Time) {
	t.Helper()
	ctx := context.Background()
	var es []*catalog.Entry
	add := func(queue string, i int, reason evidence.Reason, errType, msg string, body []byte, redrives int, extra transport.Headers) {
		at := now.Add(-time.Duration(len(es)*37) * time.Minute)
		h := transport.Headers{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "content-type": "application/json"}
		for k, v := range extra {
			h[k] = v
		}
		evidence.Record{Reason: reason, ErrorType: errType, ErrorMessage: msg, Source: "sqlite/" + queue, DeliveryCount: 1,
			RetryCount: 3, RedriveCount: redrives, FirstFailureAt: at.Add(-7 * time.Second), LastFailureAt: at, DeadLetteredAt: at,
			Consumer: "orders-consumer", ConsumerVersion: "1.4.2", Host: "worker-1"}.Apply(h)
		m := transport.Message{EventID: fmt.Sprintf("%s-%02d", strings.SplitN(queue, ".", 2)[0], i), Key: fmt.Sprintf("customer-%d", i%3),
			Type: "order.created", Body: body}
		es = append(es, catalog.NewEntry(queue, m, h, string(reason), at))
	}
	for i := range 6 {
		add("orders.created", i, evidence.ReasonPermanent, "*json.SyntaxError",
			fmt.Sprintf("decode order: invalid character 'x' looking for beginning of value at offset %d", 10+i),
			[]byte(fmt.Sprintf(`{"order_id":"o-%d","amount_cents":12x`, i)), 0, nil)
	}
	for i := 6; i < 10; i++ {
		redrives := 0
		if i == 9 {
			redrives = 2 // at max_redrives: a redrive marks it needs_manual
		}
		add("orders.created", i, evidence.ReasonRetriesExhausted, "*url.Error",
			fmt.Sprintf("charge order o-%d: payment gateway timeout after 30s", i),
			[]byte(fmt.Sprintf(`{"order_id":"o-%d","amount_cents":%d}`, i, 1000+i)), redrives, nil)
	}
	for i := range 3 {
		add("payments.captured", i, evidence.ReasonDeliveryLimit, "", "", []byte("\x00\x01binary capture"), 0,
			transport.Headers{"x-death": []any{map[string]any{"reason": "delivery_limit", "queue": "payments.captured", "count": int64(5),
				"exchange": "payments", "routing-keys": []any{"payments.captured"}}}})
	}
	if err := cat.Insert(ctx, es...); err != nil {
		t.Fatal(err)
	}
	for q, n := range map[string]int64{"orders.created": 10, "payments.captured": 3} {
		if err := cat.AddCounts(ctx, q, n, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// conserved fails the test unless every queue's ledger balances.
func (f *fixture) conserved() {
	f.t.Helper()
	rows, err := f.cat.Ledger(context.Background(), f.tr)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, r := range rows {
		if !r.Balanced() {
			f.t.Errorf("ledger of %s does not balance: %+v", r.Queue, r)
		}
	}
}

// states counts the catalog's entries by state.
func (f *fixture) states() map[string]int64 {
	f.t.Helper()
	m, err := f.cat.CountBy(context.Background(), "state", catalog.Filter{})
	if err != nil {
		f.t.Fatal(err)
	}
	return m
}

// call makes a request with an optional bearer token and JSON body and
// decodes a JSON answer into out (if not nil); it returns the status.
func (f *fixture) call(method, path string, tok *Token, body any, out any) int {
	f.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			f.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, f.ts.URL+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok != nil {
		req.Header.Set("Authorization", "Bearer "+tok.Secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			f.t.Fatalf("%s %s: %d, not JSON: %v\n%s", method, path, resp.StatusCode, err, data)
		}
	}
	return resp.StatusCode
}

// waitJob polls a redrive job until it is no longer active.
func (f *fixture) waitJob(id int64, tok *Token) jobJSON {
	f.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var j jobJSON
		if code := f.call("GET", "/api/redrives/"+itoa(id), tok, nil, &j); code != http.StatusOK {
			f.t.Fatalf("GET job %d: %d", id, code)
		}
		if !j.State.Active() {
			return j
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("job %d still running after a minute: %+v", id, j)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// consume acks every message that arrives in queue until the test ends:
// a consumer that works.
func (f *fixture) consume(queue string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	f.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			ds, err := f.broker.Receive(ctx, &transport.ReceiveParams{Queue: queue, Max: 10, Consumer: "test-consumer", Wait: 20 * time.Millisecond})
			if err != nil {
				return
			}
			var ss []transport.Settlement
			for _, d := range ds {
				ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
			}
			if len(ss) > 0 {
				_ = f.broker.Settle(ctx, &transport.SettleParams{Settlements: ss})
			}
		}
	}()
}

// waitAcked waits until the ledger counts n messages of queue acked: the
// consume goroutine settles on its own time, and with the catalog in
// another store than the transport (PostgreSQL) the transport's ack and
// the ledger's are two writes.
func (f *fixture) waitAcked(queue string, n int64) {
	f.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		rows, err := f.cat.Ledger(context.Background(), f.tr)
		if err != nil {
			f.t.Fatal(err)
		}
		for _, r := range rows {
			if r.Queue == queue && r.Acked >= n {
				return
			}
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the ledger of %s does not count %d acked after a minute: %+v", queue, n, rows)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
