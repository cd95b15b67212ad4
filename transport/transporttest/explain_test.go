package transporttest_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// fakeBroker counts one message in flight, unacked by a consumer, and two
// dead letters not drained yet.
type fakeBroker struct{}

func (fakeBroker) InFlight(context.Context, string) (int64, error) { return 1, nil }
func (fakeBroker) InFlightParts(context.Context, string) (transport.InFlightParts, error) {
	return transport.InFlightParts{Unacked: 1}, nil
}
func (fakeBroker) DeadLetterDepth(context.Context, string) (int64, error) { return 2, nil }

// wantIn fails the test for each want missing from the explanation got.
func wantIn(t *testing.T, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("explanation lacks %q:\n%s", w, got)
		}
	}
}

// TestExplainLedger: a deliberately unbalanced ledger — 25 accepted, 2
// acked, 3 dead-lettered (1 in the catalog, 2 waiting in the broker), 1
// held by the broker, 19 lost — is explained with its counts, the
// broker's, and the event IDs the ledger shows unsettled (22, the first 20
// named), leaving out the acked and the one in the catalog.
func TestExplainLedger(t *testing.T) {
	ctx := context.Background()
	cat := transporttest.TempCatalog(t)
	const q = "orders"
	if err := ledger.New(cat).AddCounts(ctx, q, 25, 2); err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		id, kind := fmt.Sprintf("e-%02d", i), "accepted"
		if i < 2 {
			kind = "acked"
		}
		key := id
		if i%2 == 0 {
			key = ledger.Key(id, []byte(id)) // the ID and a body digest, as the ledger counts a broker's messages
		}
		if _, err := cat.DB().ExecContext(ctx, `INSERT INTO lily_ledger_events(queue, kind, event_id, at) VALUES (?, ?, ?, 0)`, q, kind, key); err != nil {
			t.Fatal(err)
		}
	}
	if err := cat.Insert(ctx, catalog.NewEntry(q, transport.Message{EventID: "e-02", Body: []byte("e-02")}, transport.Headers{}, "permanent", time.Now())); err != nil {
		t.Fatal(err)
	}
	rows, err := ledger.New(cat).Rows(ctx, fakeBroker{})
	if err != nil || len(rows) != 1 {
		t.Fatalf("ledger rows %+v, %v; want the one of %s", rows, err, q)
	}
	got := transporttest.ExplainLedger(ctx, cat, fakeBroker{}, rows[0])
	t.Log(got)
	wantIn(t, got,
		"accepted 25, acked 2, dead-lettered 3, discarded 0, in flight 1, lost 19",
		"broker: in flight 1 (ready 0, retrying 0, unacked 1, dead-lettering 0, other 0); dead letters waiting in the broker 2",
		"accepted by the ledger, neither acked nor in the catalog: 22 [e-03 e-04",
		"e-22 … and 2 more]",
	)
	for _, id := range []string{"e-00", "e-01", "e-02", "e-23", "\x1f"} {
		if strings.Contains(got, id) {
			t.Errorf("explanation names %q (acked, dead-lettered, past the cap, or a digest):\n%s", id, got)
		}
	}
}

// TestExplainPublished: published IDs that ended nowhere, one that ended
// twice and one never published are each named with their places.
func TestExplainPublished(t *testing.T) {
	c := transporttest.Conservation{
		Queue:     "orders",
		Published: []string{"a", "b", "c", "d"},
		Ended:     map[string][]string{"a": {"acked"}, "b": {"acked", "in the DLQ"}, "x": {"acked"}},
		Broker:    "in flight 0",
	}
	wantIn(t, c.Explain(),
		"broker: in flight 0",
		"published 4 distinct event IDs, 2 ended somewhere",
		"published, ended nowhere (neither acked nor dead-lettered): 2 [c d]",
		"seen more than once: 1 [b (acked, in the DLQ)]",
		"never published (unknown): 1 [x (acked)]",
	)
}

// TestExplainSQLiteHeld: with the catalog in the SQLite transport's file,
// the messages the transport still holds are named.
func TestExplainSQLiteHeld(t *testing.T) {
	ctx := context.Background()
	tr, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lily.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{{Name: "q"}}}); err != nil {
		t.Fatal(err)
	}
	if err := lily.Publish(ctx, tr, "q", []lily.Message{{EventID: "held-1", Body: []byte("1")}, {EventID: "held-2", Body: []byte("2")}}); err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	rows, err := ledger.New(cat).Rows(ctx, tr)
	if err != nil || len(rows) != 1 {
		t.Fatalf("ledger rows %+v, %v; want the one of q", rows, err)
	}
	wantIn(t, transporttest.ExplainLedger(ctx, cat, tr, rows[0]),
		"accepted 2, acked 0, dead-lettered 0, discarded 0, in flight 2, lost 0",
		"broker: in flight 2",
		"still held by the SQLite transport: 2 [held-1 held-2]",
	)
}
