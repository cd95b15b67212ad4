package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// deadLettered opens a SQLite store with n messages published to queue and
// dead-lettered by a consumer, as the runtime does it.
func deadLettered(t *testing.T, queue string, n int) (*sqlite.Transport, *catalog.Store) {
	t.Helper()
	ctx := context.Background()
	tr, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "lily.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{{Name: queue}}}); err != nil {
		t.Fatal(err)
	}
	msgs := make([]transport.Message, n)
	for i := range msgs {
		msgs[i] = transport.Message{EventID: fmt.Sprintf("evt-%02d", i), Key: "k", Body: []byte(fmt.Sprint(i)),
			Headers: transport.Headers{"app": "x", evidence.HeaderRetryCount: int32(3)}}
	}
	if err := tr.Publish(ctx, &transport.PublishParams{Queue: queue, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: queue, Max: n, Consumer: "c"})
	if err != nil || len(ds) != n {
		t.Fatalf("Receive = %d, %v", len(ds), err)
	}
	var ss []transport.Settlement
	for _, d := range ds {
		h := transport.CloneHeaders(d.Headers)
		evidence.Record{Reason: evidence.ReasonRetriesExhausted, ErrorMessage: "boom", RetryCount: 3, DeadLetteredAt: time.Now()}.Apply(h)
		ss = append(ss, transport.Settlement{Delivery: d, Action: transport.DeadLetter, Headers: h, Reason: string(evidence.ReasonRetriesExhausted)})
	}
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.New(ctx, tr.DB())
	if err != nil {
		t.Fatal(err)
	}
	return tr, cat
}

func ledgerRow(t *testing.T, cat *catalog.Store, tr *sqlite.Transport) ledger.Row {
	t.Helper()
	rows, err := ledger.New(cat).Rows(context.Background(), tr)
	if err != nil || len(rows) != 1 {
		t.Fatalf("Ledger = %+v, %v", rows, err)
	}
	return rows[0]
}

// consume acks everything in the queue and returns the event IDs seen.
func consume(t *testing.T, tr *sqlite.Transport, queue string) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for {
		ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: queue, Max: 100, Consumer: "c2"})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			sort.Strings(ids)
			return ids
		}
		var ss []transport.Settlement
		for _, d := range ds {
			ids = append(ids, d.EventID)
			if d.Headers[evidence.HeaderRetryCount] != int32(0) || d.Headers[evidence.HeaderRedriveCount] != int32(1) || d.Headers["app"] != "x" {
				t.Errorf("redriven %s headers %v", d.EventID, d.Headers)
			}
			ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
		}
		if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
			t.Fatal(err)
		}
	}
}

// A redrive through the SQLite transport is not a new message: the ledger
// stays balanced from dead letter to redriven to acked.
func TestRedriveSQLiteLedger(t *testing.T) {
	ctx := context.Background()
	tr, cat := deadLettered(t, "orders", 10)
	if r := ledgerRow(t, cat, tr); r.Accepted != 10 || r.DeadLettered != 10 || r.Lost != 0 {
		t.Fatalf("before: %+v", r)
	}
	res, err := redrive.New(cat).Redrive(ctx, redrive.Params{Actor: "t",
		Target: func(context.Context, string) (redrive.Publisher, error) { return tr, nil }})
	if err != nil || res.Redriven != 10 {
		t.Fatalf("Redrive = %+v, %v", res, err)
	}
	if r := ledgerRow(t, cat, tr); r.Accepted != 10 || r.DeadLettered != 0 || r.InFlight != 10 || r.Lost != 0 {
		t.Errorf("after the redrive: %+v", r)
	}
	if ids := consume(t, tr, "orders"); len(ids) != 10 || ids[0] != "evt-00" || ids[9] != "evt-09" {
		t.Errorf("consumed %v", ids)
	}
	if r := ledgerRow(t, cat, tr); r.Accepted != 10 || r.Acked != 10 || r.InFlight != 0 || r.Lost != 0 {
		t.Errorf("after consuming: %+v", r)
	}
}

// failAfter publishes through the transport, then reports failure for the
// batches after the first ok ones: the messages went out but the confirm
// was lost (or the process died before marking them).
type failAfter struct {
	tr *sqlite.Transport
	ok int
}

func (f *failAfter) Publish(ctx context.Context, p *transport.PublishParams) error {
	if err := f.tr.Publish(ctx, p); err != nil {
		return err
	}
	if f.ok--; f.ok < 0 {
		return errors.New("connection lost before the confirm")
	}
	return nil
}

// A redrive interrupted between publish and state change leaves the
// entries pending: running it again makes duplicates, never a loss.
func TestRedriveInterruptedMakesDuplicatesNotLoss(t *testing.T) {
	ctx := context.Background()
	tr, cat := deadLettered(t, "orders", 10)
	pub := &failAfter{tr: tr, ok: 1}
	p := redrive.Params{Actor: "t", Batch: 5, Target: func(context.Context, string) (redrive.Publisher, error) { return pub, nil }}
	res, err := redrive.New(cat).Redrive(ctx, p)
	if err == nil || res.Redriven != 5 {
		t.Fatalf("interrupted Redrive = %+v, %v", res, err)
	}
	// Five redriven, five still pending whose messages were sent anyway.
	r := ledgerRow(t, cat, tr)
	if r.DeadLettered != 5 || r.InFlight != 10 || r.Lost != -5 {
		t.Errorf("after the interruption: %+v (lost < 0: duplicates, never hidden loss)", r)
	}
	pub.ok = 100
	res, err = redrive.New(cat).Redrive(ctx, p)
	if err != nil || res.Redriven != 5 {
		t.Fatalf("second Redrive = %+v, %v", res, err)
	}
	ids := consume(t, tr, "orders")
	seen := map[string]int{}
	for _, id := range ids {
		seen[id]++
	}
	for i := range 10 {
		id := fmt.Sprintf("evt-%02d", i)
		if want := map[bool]int{true: 1, false: 2}[i < 5]; seen[id] != want {
			t.Errorf("%s delivered %d times, want %d", id, seen[id], want)
		}
	}
	n, _ := cat.CountBy(ctx, "state", catalog.Filter{})
	if n["redriven"] != 10 || len(n) != 1 {
		t.Errorf("entry states %v, want 10 redriven", n)
	}
}

// Through the SQLite transport a redrive is one transaction: a publish that
// fails (here: the queue was never declared) leaves every entry pending and
// nothing in any queue.
func TestRedriveSQLiteAtomic(t *testing.T) {
	ctx := context.Background()
	tr, cat := deadLettered(t, "orders", 3)
	ghost := catalog.NewEntry("ghost", transport.Message{EventID: "g1", Body: []byte("x")}, nil, "permanent", time.Now())
	if err := cat.Insert(ctx, ghost); err != nil {
		t.Fatal(err)
	}
	_, err := redrive.New(cat).Redrive(ctx, redrive.Params{Actor: "t", Filter: catalog.Filter{Queue: "ghost"},
		Target: func(context.Context, string) (redrive.Publisher, error) { return tr, nil }})
	if !errors.Is(err, transport.ErrUnknownQueue) {
		t.Fatalf("Redrive into an undeclared queue = %v", err)
	}
	if e, _ := cat.Get(ctx, ghost.ID); e.State != catalog.StatePending || e.RedriveCount != 0 {
		t.Errorf("entry after the failed redrive: %+v", e)
	}
	var outcomes []string
	cat.EachAudit(ctx, catalog.AuditFilter{}, func(r *catalog.AuditRecord) error { outcomes = append(outcomes, r.Outcome); return nil })
	if len(outcomes) != 1 || outcomes[0] != catalog.OutcomeFailed {
		t.Errorf("audit %v, want one failed record (the redriven record rolled back)", outcomes)
	}
	if n, _ := tr.InFlight(ctx, "ghost"); n != 0 {
		t.Errorf("%d messages in the undeclared queue", n)
	}
}
