package effecttest

import (
	"context"
	"database/sql"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/inbox"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/transporttest"
)

// Recorder is a lily.Hook that keeps the events it saw.
type Recorder struct {
	mu     sync.Mutex
	events []lily.Event
}

// Observe keeps e.
func (r *Recorder) Observe(_ context.Context, e lily.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// Events returns the events seen so far.
func (r *Recorder) Events() []lily.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// Kinds counts the events of kind k.
func (r *Recorder) Kinds(k lily.EventKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, e := range r.events {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// TwinRun is what a consumer saw of a queue fed with twins.
type TwinRun struct {
	mu      sync.Mutex
	calls   int
	ids     map[string][]string // body → the event IDs of its deliveries
	content map[string]bool     // event ID → every delivery with it had ContentID set
	rec     Recorder
	logs    transporttest.SyncBuffer
	app     *sql.DB
}

// ConsumeTwins runs a consumer of qc on consumed until calls handler
// calls were made and nothing is in flight. The handler applies each
// delivery's effect (a row with its body) through an inbox with policy,
// into a SQLite application database.
func ConsumeTwins(t *testing.T, consumed transport.Transport, inflight transport.InFlightCounter, qc lily.QueueConfig, policy inbox.ContentIDPolicy, calls int) *TwinRun {
	t.Helper()
	ctx := context.Background()
	run := &TwinRun{ids: map[string][]string{}, content: map[string]bool{}}
	run.app, _ = App(t, "sqlite", t.TempDir())
	ib := inbox.Inbox{ContentIDs: policy, Hooks: []lily.Hook{&run.rec}, Logger: slog.New(slog.NewTextHandler(&run.logs, nil))}
	handler := lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		run.mu.Lock()
		run.calls++
		run.ids[string(d.Body)] = append(run.ids[string(d.Body)], d.EventID)
		if all, seen := run.content[d.EventID]; !seen || all {
			run.content[d.EventID] = d.ContentID
		}
		run.mu.Unlock()
		tx, err := run.app.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := ib.Once(ctx, tx, d, func() error {
			_, err := tx.ExecContext(ctx, `INSERT INTO effects (event_id, body, amount) VALUES ($1, $2, 1)`, d.EventID, string(d.Body))
			return err
		}); err != nil {
			return err
		}
		return tx.Commit()
	})
	c, err := lily.NewConsumer(consumed, handler, lily.ConsumerOptions{Queue: qc, Concurrency: 1, ReceiveWait: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	transporttest.RunUntil(t, c, 20*time.Second, func() bool {
		run.mu.Lock()
		n := run.calls
		run.mu.Unlock()
		f, err := inflight.InFlight(ctx, qc.Name)
		return n >= calls && err == nil && f == 0
	})
	if run.calls != calls {
		t.Fatalf("%d handler calls, want %d", run.calls, calls)
	}
	return run
}

// Effects returns how many effects were applied, in all and per body.
func (r *TwinRun) Effects(t *testing.T) (total int, perBody map[string]int) {
	t.Helper()
	rows, err := r.app.Query(`SELECT body, COUNT(*) FROM effects GROUP BY body`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	perBody = map[string]int{}
	for rows.Next() {
		var body string
		var n int
		if err := rows.Scan(&body, &n); err != nil {
			t.Fatal(err)
		}
		perBody[body] = n
		total += n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return total, perBody
}

// The twins of TestForeignTwins: two different payments a foreign producer
// sent with the same body and headers and no ID, and a third one.
const (
	TwinBody  = `{"charge":"eur 10.00","account":"acct-7"}`
	OtherBody = `{"charge":"eur 25.00","account":"acct-8"}`
)

// CheckTwins checks a twins run: content (RabbitMQ) — the twins shared one
// content ID, 2 effects, one twin reported and logged, 2 accepted; else
// the twins had IDs of their own, 3 effects, no twin, 3 accepted. Either
// way nothing is lost.
func CheckTwins(t *testing.T, run *TwinRun, cat *catalog.Store, inflight transport.InFlightCounter, qc lily.QueueConfig, content bool) {
	t.Helper()
	twinIDs := run.ids[TwinBody]
	if len(twinIDs) != 2 || len(run.ids[OtherBody]) != 1 {
		t.Fatalf("deliveries %v, want the twins and the other message once each", run.ids)
	}
	total, per := run.Effects(t)
	wantEffects, wantTwins, wantAccepted := 3, 0, int64(3)
	if content {
		wantEffects, wantTwins, wantAccepted = 2, 1, 2
	}
	if (twinIDs[0] == twinIDs[1]) != content || run.content[twinIDs[0]] != content {
		t.Errorf("twins' event IDs %v (content IDs: %v), want shared content IDs: %v", twinIDs, run.content[twinIDs[0]], content)
	}
	if total != wantEffects || per[OtherBody] != 1 {
		t.Errorf("effects %v, want %d", per, wantEffects)
	}
	if got := run.rec.Kinds(lily.EventTwin); got != wantTwins {
		t.Errorf("%d twins reported, want %d", got, wantTwins)
	}
	if warned := strings.Contains(run.logs.String(), twinIDs[0]); warned != content {
		t.Errorf("warning naming %s logged: %v, want %v (log %q)", twinIDs[0], warned, content, run.logs.String())
	}
	rows, err := ledger.New(cat).Rows(context.Background(), inflight)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(rows, func(r ledger.Row) bool { return r.Queue == qc.Name })
	if i < 0 || rows[i].Lost != 0 || rows[i].InFlight != 0 || rows[i].Accepted != wantAccepted || rows[i].Acked != wantAccepted {
		t.Fatalf("ledger %+v: want %d accepted and acked, none lost", rows, wantAccepted)
	}
	t.Logf("%s: twins' IDs %v; %d effects for 3 messages; %d twins reported; ledger accepted %d = acked %d",
		qc.Transport, twinIDs, total, run.rec.Kinds(lily.EventTwin), rows[i].Accepted, rows[i].Acked)
}
