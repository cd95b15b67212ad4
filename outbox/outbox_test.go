package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/appdbtest"
	"github.com/lily-mq/lily/internal/effecttest"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/outbox"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// app is the application's database: SQLite or PostgreSQL (database/sql),
// or PostgreSQL through pgx.
type app struct {
	name string
	db   any
	sql  *sql.DB
	pool *pgxpool.Pool
}

// add writes msgs in one business transaction, committed or rolled back.
func (a app) add(t *testing.T, commit bool, msgs ...outbox.Message) {
	t.Helper()
	ctx := context.Background()
	if a.pool != nil {
		tx, err := a.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := outbox.Add(ctx, tx, msgs...); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	tx, err := a.sql.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := outbox.Add(ctx, tx, msgs...); err != nil {
		t.Fatal(err)
	}
	if commit {
		err = tx.Commit()
	} else {
		err = tx.Rollback()
	}
	if err != nil {
		t.Fatal(err)
	}
}

func eachApp(t *testing.T, fn func(t *testing.T, a app)) {
	appdbtest.Each(t, func(t *testing.T, d appdbtest.DB) {
		fn(t, migrated(t, app{name: d.Name, db: d.Handle(), sql: d.SQL, pool: d.Pool}))
	})
}

func migrated(t *testing.T, a app) app {
	for range 2 {
		if err := outbox.Migrate(context.Background(), a.db); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// target is a real SQLite transport with one queue.
func target(t *testing.T, queue string) *sqlite.Transport {
	t.Helper()
	tr, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "queue.db"), sqlite.Options{PollInterval: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	qc := lily.QueueConfig{Name: queue}.WithDefaults()
	if err := tr.Declare(context.Background(), &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	return tr
}

// drain receives and acks everything in queue.
func drain(t *testing.T, tr transport.Transport, queue string) []*transport.Delivery {
	t.Helper()
	ctx := context.Background()
	var all []*transport.Delivery
	for {
		ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: queue, Max: 100, Consumer: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			return all
		}
		var ss []transport.Settlement
		for _, d := range ds {
			ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
		}
		if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
			t.Fatal(err)
		}
		all = append(all, ds...)
	}
}

// TestRelayPublishesCommittedRows: rows of committed transactions are
// published with their event IDs, types, keys and typed headers, in order
// per key; rows of a rolled-back transaction never are.
func TestRelayPublishesCommittedRows(t *testing.T) {
	eachApp(t, func(t *testing.T, a app) {
		const q = "orders.created"
		tr := target(t, q)
		var want []string
		for i := range 30 {
			m := outbox.Message{Queue: q, Message: lily.Message{Key: "c" + strconv.Itoa(i%4), Type: "order.created",
				Body: fmt.Appendf(nil, "order %d", i), Headers: lily.Headers{"seq": int32(i), "amount": lily.Headers{"cents": int64(199)}}}}
			ms := []outbox.Message{m}
			a.add(t, true, ms...)
			want = append(want, ms[0].EventID)
			if ms[0].EventID == "" {
				t.Fatal("Add did not write the event ID back")
			}
		}
		a.add(t, false, outbox.Message{Queue: q, Message: lily.Message{Body: []byte("rolled back")}})
		r, err := outbox.NewRelay(a.db, tr, outbox.RelayOptions{Batch: 7, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		effecttest.RelayAll(t, r)
		got := drain(t, tr, q)
		if len(got) != len(want) {
			t.Fatalf("%d published, want %d", len(got), len(want))
		}
		last := map[string]int32{}
		seen := map[string]bool{}
		for _, d := range got {
			seq, ok := d.Headers["seq"].(int32)
			if !ok || d.Type != "order.created" {
				t.Fatalf("delivery %+v: typed header or type lost", d.Message)
			}
			if _, has := d.Headers["x-retry-count"]; has {
				t.Fatalf("the relay wrote x-retry-count: %v", d.Headers)
			}
			if p, ok := last[d.Key]; ok && p >= seq {
				t.Fatalf("key %s: %d after %d", d.Key, seq, p)
			}
			last[d.Key] = seq
			seen[d.EventID] = true
		}
		for _, id := range want {
			if !seen[id] {
				t.Fatalf("event %s not published with its event ID", id)
			}
		}
		if n, err := outbox.Prune(context.Background(), a.db, time.Now().Add(time.Hour)); err != nil || n != int64(len(want)) {
			t.Fatalf("Prune = %d, %v", n, err)
		}
	})
}

// flaky fails a share of publishes before they reach the transport, and
// records, per key, the order in which rows were handed to it.
type flaky struct {
	transport.Transport
	fail    func() bool
	mu      sync.Mutex
	started map[string][]int32 // key -> seqs, in publish order
	calls   atomic.Int64
}

func (f *flaky) Publish(ctx context.Context, p *transport.PublishParams) error {
	f.calls.Add(1)
	if f.fail() {
		return errors.New("injected: broker unavailable")
	}
	f.mu.Lock()
	for _, m := range p.Messages {
		f.started[m.Key] = append(f.started[m.Key], m.Headers["seq"].(int32))
	}
	f.mu.Unlock()
	return f.Transport.Publish(ctx, p)
}

// TestTwoRelaysOnePostgres: two relays (one through database/sql, one
// through pgx) on one PostgreSQL outbox while producers keep adding rows
// and a fifth of the publishes fail: every row is published exactly once
// (no crash here, so no at-least-once repeat) and each key's rows reach
// the transport in order.
func TestTwoRelaysOnePostgres(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	sdb, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer sdb.Close()
	a := migrated(t, app{name: "postgres-sql", db: sdb, sql: sdb})
	{
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		const q = "orders.created"
		tr := target(t, q)
		var n atomic.Int64
		f := &flaky{Transport: tr, started: map[string][]int32{}, fail: func() bool { return n.Add(1)%5 == 0 }}
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		opts := outbox.RelayOptions{Batch: 10, Poll: 2 * time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, Logger: quiet}
		r1, err := outbox.NewRelay(a.sql, f, opts)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := outbox.NewRelay(pool, f, opts)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for _, r := range []*outbox.Relay{r1, r2} {
			wg.Go(func() { _ = r.Run(ctx) })
		}
		const keys, perKey = 8, 40
		var seq [keys]int32
		for i := range keys * perKey {
			k := i % keys
			a.add(t, true, outbox.Message{Queue: q, Message: lily.Message{Key: "k" + strconv.Itoa(k),
				Body: []byte("x"), Headers: lily.Headers{"seq": seq[k]}}})
			seq[k]++
		}
		waittest.Poller{Limit: time.Minute}.For(t, "the relays to publish every row", func() (bool, string) {
			p, err := r1.Pending(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return p == 0, fmt.Sprintf("%d rows pending", p)
		})
		cancel()
		wg.Wait()
		got := drain(t, tr, q)
		if len(got) != keys*perKey {
			t.Fatalf("%d messages published, want %d (exactly once each)", len(got), keys*perKey)
		}
		ids := map[string]bool{}
		for _, d := range got {
			if ids[d.EventID] {
				t.Fatalf("event %s published twice", d.EventID)
			}
			ids[d.EventID] = true
		}
		for k, seqs := range f.started {
			if len(seqs) != perKey {
				t.Fatalf("key %s: %d publishes, want %d", k, len(seqs), perKey)
			}
			for i, s := range seqs {
				if s != int32(i) {
					t.Fatalf("key %s: publish order %v", k, seqs)
				}
			}
		}
		t.Logf("%d rows, %d publish calls (every 5th failed)", len(got), f.calls.Load())
	}
}
