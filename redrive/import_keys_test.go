package redrive

import (
	"bytes"
	"context"
	"slices"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogtest"
)

// TestImportedParkedEntriesKeepTheirKeyHeld exports two parked entries of
// a held key and imports them into another catalog (SQLite and
// PostgreSQL). An export carries no held keys: before, the imported
// entries had none — listed as held by nobody, released by nothing, while
// the key's new messages passed them. Now the import holds the key (state
// held, for an operator), and an unpark releases the entries in their
// order, one at a time, until the key is free: none left behind.
func TestImportedParkedEntriesKeepTheirKeyHeld(t *testing.T) {
	ctx := context.Background()
	const q = "ledger.postings"
	src := catalogtest.OpenStore(t)
	if err := NewKeys(src).HoldKey(ctx, q, "acct-1", KeyModePark, KeyHeld, "head-1"); err != nil {
		t.Fatal(err)
	}
	park(t, src, q, "acct-1", "p-1")
	park(t, src, q, "acct-1", "p-2")
	var dump bytes.Buffer
	if n, err := src.Export(ctx, &dump, catalog.ExportParams{Actor: "test"}); err != nil || n != 2 {
		t.Fatalf("export = %d (%v), want 2", n, err)
	}
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		if res, err := s.Import(ctx, bytes.NewReader(dump.Bytes()), catalog.ImportParams{Actor: "test"}); err != nil || res.Added != 2 {
			t.Fatalf("import = %+v (%v), want 2 added", res, err)
		}
		ks := NewKeys(s)
		k, err := ks.HeldKey(ctx, q, "acct-1")
		if err != nil || k == nil || k.State != KeyHeld || k.Parked != 2 || k.HeadEventID != "p-1" {
			t.Fatalf("held key after the import = %+v (%v), want held behind p-1 with 2 parked", k, err)
		}
		// A new message of the key waits behind the imported ones.
		if state, _, _, err := ks.KeyState(ctx, q, "acct-1"); err != nil || state != KeyHeld {
			t.Fatalf("key state = %q (%v), want held", state, err)
		}
		// Importing the same file again adds nothing and moves nothing.
		if res, err := s.Import(ctx, bytes.NewReader(dump.Bytes()), catalog.ImportParams{Actor: "test"}); err != nil || res.Added != 0 || res.Skipped != 2 {
			t.Fatalf("second import = %+v (%v), want 2 skipped", res, err)
		}
		pub := &sent{}
		target := func(context.Context, string) (Publisher, error) { return pub, nil }
		res, err := ks.Unpark(ctx, UnparkParams{Queue: q, Key: "acct-1", Actor: "test", Target: target})
		if err != nil || res.Action != "release_next" || !slices.Equal(pub.ids, []string{"p-1"}) {
			t.Fatalf("unpark = %+v (%v), sent %v: want p-1 released first", res, err, pub.ids)
		}
		// The consumer processes each released entry and advances the key.
		for _, want := range []struct {
			free bool
			sent []string
		}{{false, []string{"p-1", "p-2"}}, {true, []string{"p-1", "p-2"}}} {
			free, err := ks.AdvanceKey(ctx, q, "acct-1", pub)
			if err != nil || free != want.free || !slices.Equal(pub.ids, want.sent) {
				t.Fatalf("advance = %v (%v), sent %v; want free=%v, sent %v", free, err, pub.ids, want.free, want.sent)
			}
		}
		// Conservation: both imported entries released, none left parked.
		es, err := s.List(ctx, catalog.Filter{Queue: q}, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.State != catalog.StateRedriven {
				t.Errorf("entry %s is %s at the end, want redriven (released in order)", e.EventID, e.State)
			}
		}
	})
}
