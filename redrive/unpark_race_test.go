package redrive

import (
	"context"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// TestUnparkNeverRecreatesAFreedKey interleaves, between Unpark's read of
// a held key and its decision, the consumer freeing the key (its head was
// processed and nothing of it is parked). Unpark used to upsert the key
// as waiting for that head: the key came back, waiting for a message that
// had already gone by, and every later message of the key was parked
// behind it for good. Now the decision is conditional on the key as read,
// and Unpark reports that the key moved meanwhile.
func TestUnparkNeverRecreatesAFreedKey(t *testing.T) {
	ctx := context.Background()
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		for _, c := range []struct {
			name     string
			redriven bool // the head was redriven before the unpark: "await_head", else "redrive_head"
		}{{"await_head", true}, {"redrive_head", false}} {
			q := "q." + c.name
			head := catalog.NewEntry(q, transport.Message{EventID: "head-" + c.name, Key: "k", Body: []byte("h")},
				evidenceHeaders(evidence.ReasonPermanent, "*errors.errorString", "bad", "v1", 1, 0, 0), "", testNow)
			if err := s.Insert(ctx, head); err != nil {
				t.Fatal(err)
			}
			pub := &sent{}
			target := func(context.Context, string) (Publisher, error) { return pub, nil }
			if c.redriven {
				if res, err := New(s).Redrive(ctx, Params{Filter: catalog.Filter{IDs: []int64{head.ID}}, Actor: "test", Target: target}); err != nil || res.Redriven != 1 {
					t.Fatalf("redrive the head: %+v (%v)", res, err)
				}
			}
			ks := NewKeys(s)
			if err := ks.HoldKey(ctx, q, "k", KeyModePark, KeyHeld, head.EventID); err != nil {
				t.Fatal(err)
			}
			sentBefore := len(pub.ids)
			// The consumer processes the head and frees the key (nothing is
			// parked behind it) after Unpark read the key.
			ks.afterRead = func() {
				if free, err := NewKeys(s).AdvanceKey(ctx, q, "k", pub); err != nil || !free {
					t.Errorf("%s: the consumer's advance = %v, %v: want the key freed", c.name, free, err)
				}
			}
			res, err := ks.Unpark(ctx, UnparkParams{Queue: q, Key: "k", Actor: "test", Target: target})
			if err != nil || res.Action != "nothing" {
				t.Errorf("%s: unpark = %+v (%v), want action nothing: the key moved meanwhile", c.name, res, err)
			}
			if state, allowed, h, err := ks.KeyState(ctx, q, "k"); err != nil || state != "" {
				t.Errorf("%s: key after the unpark is %q (allowed %q, head %q, %v), want free: it was recreated for a head already processed", c.name, state, allowed, h, err)
			}
			if len(pub.ids) != sentBefore {
				t.Errorf("%s: unpark sent %v, want nothing: the head was dealt with", c.name, pub.ids[sentBefore:])
			}
			// Conservation: the head's one entry is as the redrive (or
			// nothing) left it, sent at most once, and no other entry exists.
			es, err := s.List(ctx, catalog.Filter{Queue: q}, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := catalog.StatePending
			if c.redriven {
				want = catalog.StateRedriven
			}
			if len(es) != 1 || es[0].EventID != head.EventID || es[0].State != want || len(pub.ids) > 1 {
				t.Errorf("%s: entries %v, sent %v: want the head alone, %s, sent at most once", c.name, es, pub.ids, want)
			}
		}
	})
}
