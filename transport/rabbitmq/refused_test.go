package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestFullDeadLetterQueueStoresInCatalog (issue 30, item 2): with a
// catalog (ledger.Accounted), a DLQ at dlq_max_length = 3 with
// reject-publish, eight permanent failures interleaved with twenty healthy
// messages, and a consumer that holds one delivery at a time (prefetch 1):
// the dead letters the DLQ refuses go into the catalog directly — with the
// handler's error, the original body and x-lily-dlq-refused — and their
// originals are settled at once, so the healthy messages behind them are
// all acked without anyone draining the DLQ (before, the refused originals
// were held unacknowledged and the queue stalled behind them for
// RefusedHold). Every handler runs once, the runtime reports each refusal,
// the ledger balances, and the refused entries are redriven and discarded
// from the catalog like any other.
func TestFullDeadLetterQueueStoresInCatalog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs transporttest.SyncBuffer
	tr := openWith(t, rabbitmq.Options{Logger: slogTo(&logs)})
	defer tr.Close()
	qc := randomQueue("refused.dlqfull", lily.QueueConfig{DLQMaxLength: new(int64(3))})
	declared(t, tr, qc)
	cat := tempCatalog(t)
	acc := ledger.Account(tr, ledger.New(cat))
	const bad, good = 8, 20
	var msgs []lily.Message
	for i := range bad + good {
		m := lily.Message{Body: fmt.Appendf(nil, "good-%d", i)}
		if i%((bad+good)/bad) == 0 && i/((bad+good)/bad) < bad {
			m.Body = fmt.Appendf(nil, "bad-%d", i)
		}
		msgs = append(msgs, m)
	}
	if err := lily.Publish(ctx, acc, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := map[string]int{}
	acked := 0
	refusedEvents := map[string]string{}
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case e.Kind == lily.EventAcked:
			acked++
		case e.Kind == lily.EventDeadLettered && e.Refused != "":
			refusedEvents[e.EventID] = e.Refused
		}
	})
	var clog transporttest.SyncBuffer
	c, err := lily.NewConsumer(acc, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		mu.Lock()
		calls[d.EventID]++
		mu.Unlock()
		if strings.HasPrefix(string(d.Body), "bad-") {
			return lily.Permanent(errors.New("schema violation in " + string(d.Body)))
		}
		return nil
	}), lily.ConsumerOptions{Queue: qc, ReceiveWait: 20 * time.Millisecond, Logger: slogTo(&clog), Hooks: []lily.Hook{hook},
		// One delivery held at a time, one hand-off at a time: a held
		// original would stall every message behind it, and RabbitMQ
		// 3.10's soft reject-publish takes racing publishes over the limit.
		Concurrency: 1, Prefetch: 1, SettleBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	stop := transporttest.Start(t, c)
	defer func() {
		if t.Failed() {
			t.Log(logs.String(), clog.String())
		}
	}()
	var byBody map[string]*catalog.Entry
	transporttest.WaitFor(t, "every healthy message acked and every dead letter in the DLQ or the catalog, nobody draining the DLQ", func() bool {
		dl, err := tr.DeadLetterDepth(ctx, qc.Name)
		es, lerr := cat.List(ctx, catalog.Filter{Queue: qc.Name}, 0)
		mu.Lock()
		a := acked
		mu.Unlock()
		byBody = map[string]*catalog.Entry{}
		for _, e := range es {
			byBody[string(e.Body)] = e
		}
		return err == nil && lerr == nil && a == good && int(dl)+len(es) == bad
	})
	stop()
	if len(byBody) == 0 {
		t.Fatalf("no dead letter stored in the catalog: the DLQ refused none (its depth is over its max-length)")
	}
	mu.Lock()
	for _, m := range msgs {
		if calls[m.EventID] != 1 {
			t.Errorf("handler ran %d times for %s, want once", calls[m.EventID], m.Body)
		}
	}
	if len(refusedEvents) != len(byBody) {
		t.Errorf("%d dead-lettered events say the broker refused the copy, %d entries are in the catalog: want the same", len(refusedEvents), len(byBody))
	}
	mu.Unlock()
	for body, e := range byBody {
		note, _ := e.Headers[evidence.HeaderDLQRefused].(string)
		if e.Reason != string(evidence.ReasonPermanent) || e.ErrorMessage != "permanent: schema violation in "+body ||
			!strings.Contains(note, "is full") || e.State != catalog.StatePending {
			t.Errorf("entry %s (%s): reason %q error %q state %s %s %q; want Lily's evidence, pending, and why the catalog holds it",
				e.EventID, body, e.Reason, e.ErrorMessage, e.State, evidence.HeaderDLQRefused, note)
		}
		if refusedEvents[e.EventID] == "" {
			t.Errorf("entry %s: no dead-lettered event with Refused", e.EventID)
		}
	}
	if !strings.Contains(clog.String(), "stored in the catalog only") {
		t.Errorf("the consumer's log does not say a dead letter was stored in the catalog only:\n%s", clog.String())
	}
	if strings.Contains(logs.String(), "holding the originals") {
		t.Errorf("an original was held although a catalog was there to take its dead letter:\n%s", logs.String())
	}
	held, err := cat.RefusedHeld(ctx)
	if err != nil || held[qc.Name] != int64(len(byBody)) {
		t.Errorf("RefusedHeld %v (%v), want %s: %d", held, err, qc.Name, len(byBody))
	}
	// The operator drains the DLQ; every dead letter is then in the catalog.
	if _, err := cat.Ingest(ctx, acc, qc.Name); err != nil {
		t.Fatal(err)
	}
	es, err := cat.List(ctx, catalog.Filter{Queue: qc.Name}, 0)
	if err != nil || len(es) != bad {
		t.Fatalf("%d entries (%v) after the ingest, want %d", len(es), err, bad)
	}
	rows, err := ledger.New(cat).Rows(ctx, acc)
	if want := (ledger.Row{Queue: qc.Name, Accepted: bad + good, Acked: good, DeadLettered: bad}); err != nil || len(rows) != 1 || rows[0] != want {
		t.Errorf("ledger %+v (%v), want %+v", rows, err, want)
	}
	// A refused entry has no broker copy: it is redriven from the catalog
	// (its source queue gets the original bytes) and discarded there.
	var ids []int64
	for _, e := range byBody {
		ids = append(ids, e.ID)
	}
	res, err := redrive.New(cat).Redrive(ctx, redrive.Params{Filter: catalog.Filter{IDs: ids[:1]},
		Target: func(context.Context, string) (redrive.Publisher, error) { return acc, nil }})
	if err != nil || res.Redriven != 1 {
		t.Fatalf("redrive of a refused entry: %+v, %v", res, err)
	}
	d := receiveN(t, tr, transport.ReceiveParams{Queue: qc.Name, Consumer: "redrive-check", Wait: time.Second}, 1)[0]
	if e := byBody[string(d.Body)]; e == nil || e.ID != ids[0] {
		t.Errorf("redriven message %s (%q) is not the entry %d", d.EventID, d.Body, ids[0])
	}
	if v, ok := d.Headers[evidence.HeaderDLQRefused]; ok {
		t.Errorf("the redriven message carries %s = %v: it is evidence of the last dead-lettering, not of the message", evidence.HeaderDLQRefused, v)
	}
	if err := acc.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: d, Action: transport.Ack}}}); err != nil {
		t.Fatal(err)
	}
	if len(ids) > 1 {
		dr, err := cat.Discard(ctx, catalog.DecideParams{Filter: catalog.Filter{IDs: ids[1:]}, Reason: "test: the DLQ refused them; decided from the catalog"})
		if err != nil || dr.Count != len(ids)-1 {
			t.Fatalf("discard of the other refused entries: %+v, %v", dr, err)
		}
	}
	held, err = cat.RefusedHeld(ctx)
	if err != nil || held[qc.Name] != 0 {
		t.Errorf("RefusedHeld %v (%v) after every refused entry was decided, want none", held, err)
	}
	rows, err = ledger.New(cat).Rows(ctx, acc)
	if err != nil || len(rows) != 1 || rows[0].Lost != 0 {
		t.Errorf("ledger %+v (%v) after the redrive and the discard: want it balanced", rows, err)
	}
}

// TestOversizedDeadLetterStoredInCatalog (issue 30, item 2): a dead letter
// whose copy cannot fit in frame_max even with Lily's evidence cut — the
// original's own headers leave no room — is stored in the catalog through
// ledger.Accounted, with its full evidence and original headers, and its
// original is acknowledged: before, the hand-off failed, the original was
// released, and in the end the broker dead-lettered it at its delivery
// limit with Lily's reason and error lost. Its neighbour's copy goes to
// the DLQ as usual, and the ledger balances.
func TestOversizedDeadLetterStoredInCatalog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qc := randomQueue("refused.frame", lily.QueueConfig{})
	tr := openDeclared(t, qc)
	cat := tempCatalog(t)
	acc := ledger.Account(tr, ledger.New(cat))
	conn, ch := rawChannel(t)
	ids := []string{"full-1", "small-1"}
	if err := ch.PublishWithContext(ctx, "", qc.Name, true, false, sizedPublishing(t, ids[0], conn.Config.FrameSize-20)); err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(ctx, "", qc.Name, true, false, sizedPublishing(t, ids[1], 1000)); err != nil {
		t.Fatal(err)
	}
	ds := receiveN(t, acc, transport.ReceiveParams{Queue: qc.Name, Wait: time.Second, Consumer: "oversized"}, 2)
	errMsg := "permanent: " + strings.Repeat("the whole story of the failure ", 40)
	var ss []transport.Settlement
	for _, d := range ds {
		h := transport.CloneHeaders(d.Headers)
		h[evidence.HeaderReason] = string(evidence.ReasonPermanent)
		h[evidence.HeaderErrorMessage] = errMsg
		h[evidence.HeaderErrorStack] = strings.Repeat("main.handler()\n\t/src/main.go:42\n", 100)
		h[evidence.HeaderSource] = "rabbitmq/" + qc.Name
		ss = append(ss, transport.Settlement{Delivery: d, Action: transport.DeadLetter, Reason: string(evidence.ReasonPermanent), Headers: h})
	}
	stored := map[int]string{}
	err := acc.Settle(ctx, &transport.SettleParams{Settlements: ss, OnStored: func(i int, why string) { stored[i] = why }})
	if err != nil {
		t.Fatalf("settle: %v, want both applied (one through the catalog)", err)
	}
	if len(stored) != 1 || ds[0].EventID != ids[0] && ds[1].EventID != ids[0] {
		t.Fatalf("stored in the catalog: %v, want %s alone", stored, ids[0])
	}
	for i, why := range stored {
		if ds[i].EventID != ids[0] || !strings.Contains(why, "frame_max") {
			t.Errorf("stored %s: %q, want %s because of frame_max", ds[i].EventID, why, ids[0])
		}
	}
	es, err := cat.List(ctx, catalog.Filter{Queue: qc.Name}, 0)
	if err != nil || len(es) != 1 {
		t.Fatalf("%d entries (%v), want the oversized dead letter", len(es), err)
	}
	e := es[0]
	if e.EventID != ids[0] || e.ErrorMessage != errMsg || e.Headers[evidence.HeaderErrorStack] != ss[0].Headers[evidence.HeaderErrorStack] ||
		len(e.Headers["blob"].(string)) < conn.Config.FrameSize-2000 || e.Headers[rabbitmq.HeaderEvidenceTruncated] != nil ||
		!strings.Contains(e.Headers[evidence.HeaderDLQRefused].(string), "frame_max") {
		t.Errorf("entry %s: error %d bytes, truncated %v, refused %v: want the full evidence, the original headers and why",
			e.EventID, len(e.ErrorMessage), e.Headers[rabbitmq.HeaderEvidenceTruncated], e.Headers[evidence.HeaderDLQRefused])
	}
	// The original is gone from the queue (acknowledged); the neighbour is
	// in the DLQ; after the ingest both are entries and the ledger balances.
	transporttest.WaitFor(t, "the neighbour's copy in the DLQ", func() bool {
		n, err := tr.DeadLetterDepth(ctx, qc.Name)
		return err == nil && n == 1
	})
	if _, err := cat.Ingest(ctx, acc, qc.Name); err != nil {
		t.Fatal(err)
	}
	rows, err := ledger.New(cat).Rows(ctx, acc)
	if want := (ledger.Row{Queue: qc.Name, Accepted: 2, DeadLettered: 2}); err != nil || len(rows) != 1 || rows[0] != want {
		t.Errorf("ledger %+v (%v), want %+v", rows, err, want)
	}
}
