package sqlite_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestParkingHoldsAFreedKeyAgain: a consumer looked at key K (held) and
// parks its message, but K was advanced and freed before the parking's
// transaction: the settlement holds K again, waiting for the parked entry
// (mode from x-lily-hold-mode), instead of leaving an entry no advance
// will ever release. The consumers' key poll then sends the entry back
// (once the grace has passed), it is processed, K is free and the ledger
// balances.
func TestParkingHoldsAFreedKeyAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lily.db"), sqlite.Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	q := lily.QueueConfig{Name: "ordered.freed", Ordering: lily.OrderingBlock}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
		t.Fatal(err)
	}
	if err := lily.Publish(ctx, tr, q.Name, []lily.Message{{Key: "K", Body: []byte("K/1")}}); err != nil {
		t.Fatal(err)
	}
	ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: q.Name, Max: 1, Consumer: "c"})
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive = %v, %v", ds, err)
	}
	d := ds[0]
	// The consumer saw K held and parks d; K has been freed meanwhile
	// (no row in lily_held_keys).
	h := transport.CloneHeaders(d.Headers)
	if h == nil {
		h = transport.Headers{}
	}
	evidence.Record{Reason: evidence.ReasonParked, ErrorMessage: "key K is held", DeadLetteredAt: time.Now(), HoldKey: "K", HoldMode: string(lily.OrderingBlock)}.Apply(h)
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: d, Action: transport.DeadLetter, Headers: h, Reason: string(evidence.ReasonParked)}}}); err != nil {
		t.Fatal(err)
	}
	k, err := redrive.NewKeys(cat).HeldKey(ctx, q.Name, "K")
	if err != nil || k == nil || k.State != redrive.KeyWaiting || k.AllowedEventID != d.EventID || k.Mode != redrive.KeyModeBlock || k.Parked != 1 {
		t.Fatalf("K after the parking = %+v (%v); want waiting for %s, mode block, 1 parked", k, err, d.EventID)
	}
	// The grace a live sender would have is over (made so here).
	if _, err := tr.DB().ExecContext(ctx, `UPDATE lily_held_keys SET updated_at = ?`, time.Now().Add(-2*redrive.ResumeGrace).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	log := &transporttest.BodyLog{}
	c, err := lily.NewConsumer(tr, log, lily.ConsumerOptions{Queue: q, Keys: redrive.NewKeys(cat), ReceiveWait: 20 * time.Millisecond, KeyPoll: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	stop := transporttest.Start(t, c)
	transporttest.WaitFor(t, "the parked message processed and K free", func() bool {
		k, err := redrive.NewKeys(cat).HeldKey(ctx, q.Name, "K")
		return err == nil && k == nil && len(log.Bodies()) == 1
	})
	stop()
	if got := log.Bodies(); !slices.Equal(got, []string{"K/1"}) {
		t.Errorf("processed %v, want K/1 once", got)
	}
	if n, err := cat.CountBy(ctx, "state", catalog.Filter{Queue: q.Name}); err != nil || n["parked"] != 0 || n["redriven"] != 1 {
		t.Errorf("entry states %v (%v): want the parked entry released", n, err)
	}
	if rows, err := ledger.New(cat).Rows(ctx, tr); err != nil || len(rows) != 1 || rows[0] != (ledger.Row{Queue: q.Name, Accepted: 1, Acked: 1}) {
		t.Errorf("ledger = %+v (%v)", rows, err)
	}
}
