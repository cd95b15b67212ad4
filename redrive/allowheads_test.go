package redrive

import (
	"context"
	"fmt"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
)

// A bulk redrive lets through exactly the heads of held keys among the
// entries it sends — in any batch, and in any of allowHeads' statements
// within a batch — and leaves a held key alone when its head is not sent
// or is the same key of another queue.
func TestRedriveLetsHeadsOfHeldKeysThrough(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		const q, other = "ledger.postings", "ledger.refunds"
		var es []*catalog.Entry
		for i := range 700 {
			m := transport.Message{EventID: fmt.Sprintf("e-%d", i), Key: fmt.Sprintf("k-%03d", i), Body: []byte{byte(i)}}
			es = append(es, catalog.NewEntry(q, m, transport.Headers{}, "permanent", testNow))
		}
		if err := s.Insert(ctx, es...); err != nil {
			t.Fatal(err)
		}
		holds := []struct{ queue, key, head string }{
			{q, "k-000", "e-0"},       // first batch, first statement
			{q, "k-400", "e-400"},     // first batch (500), second statement (300 each)
			{q, "k-650", "e-650"},     // second batch
			{q, "k-010", "elsewhere"}, // its head is not among the entries
			{other, "k-030", "e-30"},  // same key and event ID, another queue
		}
		for _, h := range holds {
			if err := NewKeys(s).HoldKey(ctx, h.queue, h.key, KeyModePark, KeyHeld, h.head); err != nil {
				t.Fatal(err)
			}
		}
		pub := &sent{}
		res, err := New(s).Redrive(ctx, Params{Batch: 500, Actor: "test",
			Target: func(context.Context, string) (Publisher, error) { return pub, nil }})
		if err != nil || res.Redriven != 700 || len(pub.ids) != 700 {
			t.Fatalf("redrive = %+v, %v; sent %d", res, err, len(pub.ids))
		}
		for _, h := range holds {
			state, allowed, _, err := NewKeys(s).KeyState(ctx, h.queue, h.key)
			if err != nil {
				t.Fatal(err)
			}
			wantState, wantAllowed := KeyWaiting, h.head
			if h.head == "elsewhere" || h.queue == other {
				wantState, wantAllowed = KeyHeld, ""
			}
			if state != wantState || allowed != wantAllowed {
				t.Errorf("%s/%s (head %s): %s allowed %q, want %s allowed %q", h.queue, h.key, h.head, state, allowed, wantState, wantAllowed)
			}
		}
	})
}
