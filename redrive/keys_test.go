package redrive

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// sent records what a key's releases publish; it is the publishing half of
// a transport (nothing is ever received from it).
type sent struct{ ids []string }

func (s *sent) Publish(_ context.Context, p *transport.PublishParams) error {
	for _, m := range p.Messages {
		if !p.Redrive {
			return errors.New("a release must be published as a redrive (not counted as accepted again)")
		}
		if _, ok := m.Headers[evidence.HeaderReason]; ok {
			return errors.New("a release must not carry the parking's evidence")
		}
		s.ids = append(s.ids, m.EventID)
	}
	return nil
}
func (s *sent) Receive(context.Context, *transport.ReceiveParams) ([]*transport.Delivery, error) {
	return nil, errors.New("not a source")
}
func (s *sent) Settle(context.Context, *transport.SettleParams) error {
	return errors.New("not a source")
}
func (s *sent) Close() error { return nil }

// park adds a parked entry of key (reason parked) as the consumer's
// diversion does.
func park(t *testing.T, s *catalog.Store, queue, key, id string) {
	t.Helper()
	h := transport.Headers{"app": "x"}
	evidence.Record{Reason: evidence.ReasonParked, ErrorMessage: "waits behind its key", DeadLetteredAt: testNow, HoldKey: key}.Apply(h)
	e := catalog.NewEntry(queue, transport.Message{EventID: id, Key: key, Body: []byte(id)}, h, string(evidence.ReasonParked), testNow)
	if e.State != catalog.StateParked {
		t.Fatalf("a parked copy became an entry in state %s", e.State)
	}
	if err := s.Insert(context.Background(), e); err != nil {
		t.Fatal(err)
	}
}

// TestHeldKeyLifecycle walks a key through held, advance (one parked entry
// at a time, in order), a crash between allowing an entry and sending it
// (ResumeKeys sends it once the grace has passed), and release.
func TestHeldKeyLifecycle(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		const q = "ledger.postings"
		if err := NewKeys(s).HoldKey(ctx, q, "acct-1", KeyModePark, KeyHeld, "head-1"); err != nil {
			t.Fatal(err)
		}
		if err := NewKeys(s).HoldKey(ctx, q, "acct-2", KeyModePark, KeyHeld, "head-2"); err != nil {
			t.Fatal(err)
		}
		park(t, s, q, "acct-1", "p-1")
		park(t, s, q, "acct-1", "p-2")
		park(t, s, q, "acct-2", "other") // another key's entry is not released
		k, err := NewKeys(s).HeldKey(ctx, q, "acct-1")
		if err != nil || k == nil || k.Parked != 2 || k.State != KeyHeld || k.Head != nil {
			t.Fatalf("held key = %+v (%v)", k, err)
		}
		pub := &sent{}
		if free, err := NewKeys(s).AdvanceKey(ctx, q, "acct-1", pub); err != nil || free {
			t.Fatalf("advance = %v, %v", free, err)
		}
		if state, allowed, _, _ := NewKeys(s).KeyState(ctx, q, "acct-1"); state != KeyWaiting || allowed != "p-1" || !slices.Equal(pub.ids, []string{"p-1"}) {
			t.Fatalf("after advance: %s allowed %s, sent %v", state, allowed, pub.ids)
		}
		// The process allows p-2, then dies before sending it.
		if err := NewKeys(s).HoldKey(ctx, q, "acct-1", KeyModePark, KeyWaiting, "p-2"); err != nil {
			t.Fatal(err)
		}
		if n, err := NewKeys(s).ResumeKeys(ctx, q, pub); err != nil || n != 2 || len(pub.ids) != 1 {
			t.Fatalf("resume within the grace = %d, %v, sent %v: a live consumer is sending it", n, err, pub.ids)
		}
		stale := time.Now().Add(-2 * ResumeGrace).UnixMilli()
		if _, err := NewKeys(s).db.ExecContext(ctx, `UPDATE lily_held_keys SET updated_at = ?`, stale); err != nil {
			t.Fatal(err)
		}
		if n, err := NewKeys(s).ResumeKeys(ctx, q, pub); err != nil || n != 2 || !slices.Equal(pub.ids, []string{"p-1", "p-2"}) {
			t.Fatalf("resume after the grace = %d, %v, sent %v", n, err, pub.ids)
		}
		if n, err := NewKeys(s).ResumeKeys(ctx, q, pub); err != nil || n != 2 || len(pub.ids) != 2 {
			t.Fatalf("second resume = %d, %v, sent %v: p-2 was sent already", n, err, pub.ids)
		}
		if free, err := NewKeys(s).AdvanceKey(ctx, q, "acct-1", pub); err != nil || !free {
			t.Fatalf("last advance = %v, %v: nothing is parked, the key is free", free, err)
		}
		if k, err := NewKeys(s).HeldKey(ctx, q, "acct-1"); err != nil || k != nil {
			t.Errorf("acct-1 at the end = %+v (%v), want free", k, err)
		}
		released := 0
		if err := s.EachAudit(ctx, catalog.AuditFilter{}, func(r *catalog.AuditRecord) error {
			if r.Action == ActionRelease && r.Outcome == OutcomeReleased {
				released += r.Count
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if released != 2 {
			t.Errorf("audit shows %d releases, want 2", released)
		}
	})
}

// TestBlockedKeyMovesOnWhenItsHeadIsDiscarded: a blocked key whose head is
// discarded releases its parked entries (ResumeKeys); a parked key does
// not — it waits for unpark.
func TestBlockedKeyMovesOnWhenItsHeadIsDiscarded(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		for _, mode := range []string{KeyModeBlock, KeyModePark} {
			q := "q." + mode
			head := catalog.NewEntry(q, transport.Message{EventID: "head", Key: "k", Body: []byte("h")},
				evidenceHeaders(evidence.ReasonPermanent, "*errors.errorString", "bad", "v1", 1, 0, 0), "", testNow)
			if err := s.Insert(ctx, head); err != nil {
				t.Fatal(err)
			}
			if err := NewKeys(s).HoldKey(ctx, q, "k", mode, KeyHeld, "head"); err != nil {
				t.Fatal(err)
			}
			park(t, s, q, "k", "next")
			park(t, s, q, "k", "after") // sent only once "next" was processed
			if _, err := s.Discard(ctx, catalog.DecideParams{Filter: catalog.Filter{IDs: []int64{head.ID}}, Reason: "not valid, ever"}); err != nil {
				t.Fatal(err)
			}
			pub := &sent{}
			if _, err := NewKeys(s).ResumeKeys(ctx, q, pub); err != nil {
				t.Fatal(err)
			}
			want := []string{"next"}
			if mode == KeyModePark {
				want = nil
			}
			// Polled again while the released entry is on its way: nothing more.
			if _, err := NewKeys(s).ResumeKeys(ctx, q, pub); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(pub.ids, want) {
				t.Errorf("%s: sent %v after the head was discarded, want %v", mode, pub.ids, want)
			}
		}
	})
}

// Keys is the runtime's key store.
var _ lily.KeyStore = (*Keys)(nil)
