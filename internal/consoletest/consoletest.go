// Package consoletest is the fixture of the tests of the console and its
// HTTP API: package httpapi's own tests and the browser tests in
// httpapi/browsertest. A Fixture is a temporary SQLite transport and a
// catalog — in the transport's file, or PostgreSQL — holding the dead
// letters of two queues, whose ledger balances; each test package builds
// its httpapi.Server over the fixture's parts and serves it with Serve.
//
// It does not import httpapi, so that httpapi's in-package tests can use
// it.
package consoletest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// Fixture is a temporary SQLite transport and a catalog with dead letters
// of two queues (orders.created and payments.captured), whose ledger
// balances. Everything is closed when the test ends.
type Fixture struct {
	// T is the test the fixture belongs to.
	T testing.TB
	// Transport is the SQLite transport: the queues, and what counts
	// their messages in flight.
	Transport *sqlite.Transport
	// Catalog is the catalog: in Transport's file, or PostgreSQL.
	Catalog *catalog.Store
	// Broker is what publishes and consumes: Transport itself on SQLite,
	// Transport accounted in the PostgreSQL catalog's ledger otherwise.
	Broker transport.Transport
	// Config configures the fixture's queues (NewConfig).
	Config config.Config
}

// Kinds are the catalog stores a fixture is made on: the SQLite file of
// the transport, and a PostgreSQL catalog (its own schema) beside a SQLite
// transport that stands for the broker.
var Kinds = []string{"sqlite", "postgres"}

// NewConfig configures the fixture's queues.
func NewConfig() config.Config {
	return config.Config{Queues: []lily.QueueConfig{
		{Name: "orders.created", Owner: "team-checkout", RetryAttempts: 3, DLQRetentionHours: new(72)},
		{Name: "payments.captured", Owner: "team-payments", MaxRedrives: new(1)},
	}}.WithDefaults()
}

// JSONQueues declares orders.created as JSON in c.
func JSONQueues(c *config.Config) {
	for i := range c.Queues {
		if c.Queues[i].Name == "orders.created" {
			c.Queues[i].ContentType = catalog.ContentJSON
		}
	}
}

// New makes a fixture whose catalog is of kind (one of Kinds).
func New(t testing.TB, kind string) *Fixture {
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
	cfg := NewConfig()
	var specs []transport.QueueSpec
	for _, q := range cfg.Queues {
		specs = append(specs, q.Spec())
	}
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: specs}); err != nil {
		t.Fatal(err)
	}
	seed(t, cat, time.Now())
	var broker transport.Transport = tr
	if kind == "postgres" {
		// A broker's consumers count in the catalog's ledger: each
		// message once, by identity, as lily.Publish recorded it.
		broker = ledger.Account(tr, ledger.New(cat))
		err := cat.Each(ctx, catalog.Filter{}, func(e *catalog.Entry) error {
			_, err := cat.DB().ExecContext(ctx, `INSERT INTO lily_ledger_events(queue, kind, event_id, at) VALUES ($1, 'accepted', $2, $3)`,
				e.Queue, ledger.Key(e.EventID, e.Body), e.DeadLetteredAt.UnixMilli())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return &Fixture{T: t, Transport: tr, Catalog: cat, Broker: broker, Config: cfg}
}

// Target is the redrive target of every queue (httpapi.Options.Target):
// the fixture's Broker.
func (f *Fixture) Target(context.Context, string) (redrive.Publisher, error) { return f.Broker, nil }

// Server is what the fixture serves: an *httpapi.Server.
type Server interface {
	http.Handler
	Close() error
}

// Serve serves srv on a test HTTP server; both are closed when the test
// ends.
func (f *Fixture) Serve(srv Server) *httptest.Server {
	ts := httptest.NewServer(srv)
	f.T.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	return ts
}

// seed adds the dead letters: in orders.created 6 malformed bodies
// (permanent), 4 gateway timeouts (retries_exhausted, one of them already
// redriven twice); in payments.captured 3 broker dead letters with x-death
// (delivery_limit). Each is counted accepted in the ledger, so that it
// balances: accepted = dead-lettered.
func seed(t testing.TB, cat *catalog.Store, now time.Time) {
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
		if err := ledger.New(cat).AddCounts(ctx, q, n, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// Conserved fails the test unless every queue's ledger balances.
func (f *Fixture) Conserved() {
	f.T.Helper()
	rows, err := ledger.New(f.Catalog).Rows(context.Background(), f.Transport)
	if err != nil {
		f.T.Fatal(err)
	}
	for _, r := range rows {
		if !r.Balanced() {
			f.T.Errorf("ledger of %s does not balance: %+v\n%s", r.Queue, r, transporttest.ExplainLedger(context.Background(), f.Catalog, f.Transport, r))
		}
	}
}

// States counts the catalog's entries by state.
func (f *Fixture) States() map[string]int64 {
	f.T.Helper()
	m, err := f.Catalog.CountBy(context.Background(), "state", catalog.Filter{})
	if err != nil {
		f.T.Fatal(err)
	}
	return m
}

// Consume acks every message that arrives in queue until the test ends:
// a consumer that works.
func (f *Fixture) Consume(queue string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	f.T.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			ds, err := f.Broker.Receive(ctx, &transport.ReceiveParams{Queue: queue, Max: 10, Consumer: "test-consumer", Wait: 20 * time.Millisecond})
			if err != nil {
				return
			}
			var ss []transport.Settlement
			for _, d := range ds {
				ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
			}
			if len(ss) > 0 {
				_ = f.Broker.Settle(ctx, &transport.SettleParams{Settlements: ss})
			}
		}
	}()
}

// WaitAcked waits until the ledger counts n messages of queue acked: the
// consume goroutine settles on its own time, and with the catalog in
// another store than the transport (PostgreSQL) the transport's ack and
// the ledger's are two writes.
func (f *Fixture) WaitAcked(queue string, n int64) {
	f.T.Helper()
	waittest.Poller{Limit: time.Minute}.For(f.T, fmt.Sprintf("the ledger of %s to count %d acked", queue, n), func() (bool, string) {
		rows, err := ledger.New(f.Catalog).Rows(context.Background(), f.Transport)
		if err != nil {
			f.T.Fatal(err)
		}
		for _, r := range rows {
			if r.Queue == queue && r.Acked >= n {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", rows)
	})
}
