package ledger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogtest"
	"github.com/lily-mq/lily/transport"
)

// markedDelivery is a delivery whose publisher marked it counted
// (HeaderCounted) — without the publisher's count having happened, as
// when it died between the broker's confirm and its count.
func markedDelivery(queue, id, body string) *transport.Delivery {
	d := delivery(queue, id, body)
	d.Headers = transport.Headers{HeaderCounted: "1"}
	return d
}

// TestMarkedCountedAtSettlement: on a ledger that trusts marks (PostgreSQL)
// a marked delivery is not counted on receipt; its settlement counts it —
// accepted and acked for an ack, accepted for a retry or a dead-lettering
// — so a mark whose count never happened still balances. On SQLite every
// receipt is counted as before. Either way each message is accepted once.
func TestMarkedCountedAtSettlement(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		l := New(s)
		trusts, err := l.trustsMarks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fb := &fakeBroker{queued: []*transport.Delivery{
			markedDelivery("q", "acked", "a"), markedDelivery("q", "retried", "b"),
			markedDelivery("q", "dead", "c"), delivery("q", "foreign", "d"),
		}}
		a := Account(fb, l)
		ds, err := a.Receive(ctx, &transport.ReceiveParams{Queue: "q", Max: 10})
		if err != nil || len(ds) != 4 {
			t.Fatalf("receive: %d deliveries, %v", len(ds), err)
		}
		r := ledgerOf(t, s, "q")
		if want := map[bool]int64{true: 1, false: 4}[trusts]; r.Accepted != want {
			t.Fatalf("after receipt (trusts marks: %v): accepted %d, want %d (the unmarked one%s)", trusts, r.Accepted, want, map[bool]string{false: " and the marked ones"}[trusts])
		}
		settle := func(ss ...transport.Settlement) {
			t.Helper()
			if err := a.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
				t.Fatal(err)
			}
		}
		settle(transport.Settlement{Delivery: ds[0], Action: transport.Ack},
			transport.Settlement{Delivery: ds[1], Action: transport.Retry, Delay: time.Second},
			transport.Settlement{Delivery: ds[2], Action: transport.DeadLetter, Reason: "permanent"},
			transport.Settlement{Delivery: ds[3], Action: transport.Ack})
		if r := ledgerOf(t, s, "q"); r.Accepted != 4 || r.Acked != 2 {
			t.Fatalf("after settling: ledger %+v, want accepted 4, acked 2", r)
		}
		// The retry copy comes back (marked, as the original) and is acked;
		// the acked one is redelivered and acked again: nothing new.
		fb.queued = []*transport.Delivery{markedDelivery("q", "retried", "b"), markedDelivery("q", "acked", "a")}
		ds, err = a.Receive(ctx, &transport.ReceiveParams{Queue: "q", Max: 10})
		if err != nil || len(ds) != 2 {
			t.Fatalf("receive again: %d deliveries, %v", len(ds), err)
		}
		settle(transport.Settlement{Delivery: ds[0], Action: transport.Ack}, transport.Settlement{Delivery: ds[1], Action: transport.Ack})
		if r := ledgerOf(t, s, "q"); r.Accepted != 4 || r.Acked != 3 {
			t.Errorf("after the retry and the redelivery: ledger %+v, want accepted 4, acked 3 (the dead letter is the fourth)", r)
		}
	})
}

// TestPublishMarksWhatItCounts: an Accounted publisher marks the messages
// it counts and leaves the caller's headers alone; a redrive (counted
// before) is not marked again.
func TestPublishMarksWhatItCounts(t *testing.T) {
	ctx := context.Background()
	rec := &recordingPublisher{}
	a := Account(rec, New(catalogtest.OpenStore(t)))
	h := transport.Headers{"tenant": "t1"}
	if err := a.Publish(ctx, &transport.PublishParams{Queue: "q", Messages: []transport.Message{{EventID: "e1", Body: []byte("x"), Headers: h}}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctx, &transport.PublishParams{Queue: "q", Redrive: true, Messages: []transport.Message{{EventID: "e2", Body: []byte("y")}}}); err != nil {
		t.Fatal(err)
	}
	if len(rec.got) != 2 {
		t.Fatalf("%d messages published, want 2", len(rec.got))
	}
	if v := rec.got[0].Headers[HeaderCounted]; v != "1" || rec.got[0].Headers["tenant"] != "t1" {
		t.Errorf("published headers %v, want %s = 1 beside the caller's", rec.got[0].Headers, HeaderCounted)
	}
	if _, ok := h[HeaderCounted]; ok {
		t.Errorf("the caller's headers were changed: %v", h)
	}
	if _, ok := rec.got[1].Headers[HeaderCounted]; ok || rec.got[1].Headers[HeaderAcceptedOn] != "q" {
		t.Errorf("a redrive's headers %v, want %s = q and no %s", rec.got[1].Headers, HeaderAcceptedOn, HeaderCounted)
	}
}

// recordingPublisher keeps what it is asked to publish.
type recordingPublisher struct {
	nopTransport
	got []transport.Message
}

func (r *recordingPublisher) Publish(_ context.Context, p *transport.PublishParams) error {
	r.got = append(r.got, p.Messages...)
	return nil
}

// TestPostgresSettleExactUnderConcurrency: four processes settle the same
// marked, never-counted messages at once — two ack them, two retry them
// (two copies of each message in flight) — in overlapping batches in
// random order. Each message is counted accepted once and acked once: the
// unique index decides which statement inserts a row, and the row's xmax
// tells an inserted row (counted accepted) from a turned one.
func TestPostgresSettleExactUnderConcurrency(t *testing.T) {
	const writers, msgs, batch = 4, 400, 25
	ss := openPGStores(t, writers)
	ctx := context.Background()
	concurrently(t, writers, func(w int) error {
		a := Account(nopTransport{}, New(ss[w]))
		action := []transport.Action{transport.Ack, transport.Retry}[w%2]
		for _, batchIDs := range shuffledBatches(msgs, batch) {
			var b []transport.Settlement
			for _, j := range batchIDs {
				b = append(b, transport.Settlement{Delivery: markedDelivery("q", fmt.Sprintf("m%d", j), "body"), Action: action, Delay: time.Second})
			}
			if err := a.Settle(ctx, &transport.SettleParams{Settlements: b}); err != nil {
				return err
			}
		}
		return nil
	})
	if r := ledgerOf(t, ss[0], "q"); r.Accepted != msgs || r.Acked != msgs {
		t.Errorf("ledger %+v, want accepted %d, acked %d", r, msgs, msgs)
	}
	if got := eventRows(t, ss[0]); got != msgs {
		t.Errorf("%d ledger rows, want one per message (%d)", got, msgs)
	}
}

// TestPostgresRedriveOfAnEditedBodyAcceptedOnce: a dead letter whose body
// an editor changed comes back redriven to its queue under a new ledger
// key, marked accepted there (HeaderAcceptedOn). It was accepted the first
// time it came: its receipt and its ack count it acked only. The same
// message redirected to another queue is new there and counted accepted
// and acked. Both ledgers balance. Before, the edited redrive's ack
// counted it accepted again (lost -1).
func TestPostgresRedriveOfAnEditedBodyAcceptedOnce(t *testing.T) {
	ctx := context.Background()
	s := openPGStores(t, 1)[0]
	l := New(s)
	fb := &fakeBroker{queued: []*transport.Delivery{markedDelivery("q", "good", "a"), markedDelivery("q", "edited", "bad")}}
	a := Account(fb, l)
	if err := l.count(ctx, "q", "accepted", []string{Key("good", []byte("a")), Key("edited", []byte("bad"))}); err != nil { // the publisher's count
		t.Fatal(err)
	}
	ds, err := a.Receive(ctx, &transport.ReceiveParams{Queue: "q", Max: 10})
	if err != nil || len(ds) != 2 {
		t.Fatalf("receive: %d, %v", len(ds), err)
	}
	if err := a.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: ds[0], Action: transport.Ack}}}); err != nil {
		t.Fatal(err)
	}
	// ds[1] was dead-lettered (its entry, which the ledger reads from the
	// catalog, is not part of this test); an editor fixed its body; it is
	// redriven to q, and redirected to r.
	redrive := func(queue, on string) *transport.Delivery {
		d := markedDelivery(queue, "edited", "fixed")
		d.Headers[evidence.HeaderRedriveCount] = int32(1)
		if on != "" {
			d.Headers[HeaderAcceptedOn] = on
		}
		return d
	}
	fb.queued = []*transport.Delivery{redrive("q", "q"), redrive("r", "")}
	if ds, err = a.Receive(ctx, &transport.ReceiveParams{Queue: "q", Max: 10}); err != nil || len(ds) != 2 {
		t.Fatalf("receive the redrive and the redirect: %d, %v", len(ds), err)
	}
	if err := a.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: ds[0], Action: transport.Ack}, {Delivery: ds[1], Action: transport.Ack}}}); err != nil {
		t.Fatal(err)
	}
	if r := ledgerOf(t, s, "q"); r.Accepted != 2 || r.Acked != 2 {
		t.Errorf("ledger of q %+v, want accepted 2 (each message once), acked 2", r)
	}
	if r := ledgerOf(t, s, "r"); r.Accepted != 1 || r.Acked != 1 {
		t.Errorf("ledger of r %+v, want the redirected message accepted and acked once", r)
	}
}
