package catalog

import (
	"context"
	"testing"
	"time"

	"github.com/lily-mq/lily/evidence"
)

// TestDiscardExpireEraseRemoveEveryVersion reads the raw tables: after a
// discard, an expiry or an erase, no version of an edited body is left,
// and the hashes and sizes are.
func TestDiscardExpireEraseRemoveEveryVersion(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		es := []*Entry{
			entry("q", "d", evidence.ReasonPermanent, StatePending, "x"),
			entry("q", "x", evidence.ReasonPermanent, StatePending, "x"),
			entry("q", "r", evidence.ReasonPermanent, StatePending, "x"),
			entry("q", "keep", evidence.ReasonPermanent, StatePending, "x"),
		}
		es[1].DeadLetteredAt = testNow.Add(-1000 * time.Hour)
		if err := s.Insert(ctx, es...); err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			for i, b := range []string{`{"v":1}`, `{"v":2}`} {
				if _, err := s.Edit(ctx, EditParams{ID: e.ID, Body: []byte(b), Reason: "edit " + b}); err != nil {
					t.Fatalf("edit %d of %s: %v", i, e.EventID, err)
				}
			}
		}
		if _, err := s.Discard(ctx, DecideParams{Filter: Filter{IDs: []int64{es[0].ID}}, Reason: "cannot be fixed"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Expire(ctx, ExpireParams{Queues: []string{"q"}, Now: func() time.Time { return testNow }}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Erase(ctx, DecideParams{Filter: Filter{IDs: []int64{es[2].ID}}}); err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			var withBody, total, sized int
			if err := s.db.QueryRowContext(ctx, `SELECT COUNT(body), COUNT(*), SUM(CASE WHEN body_size = 7 AND body_sha256 <> '' THEN 1 ELSE 0 END)
				FROM lily_dlq_versions WHERE entry_id = ?`, e.ID).Scan(&withBody, &total, &sized); err != nil {
				t.Fatal(err)
			}
			var entryBody int
			if err := s.db.QueryRowContext(ctx, `SELECT COUNT(body) FROM lily_dlq_entries WHERE id = ?`, e.ID).Scan(&entryBody); err != nil {
				t.Fatal(err)
			}
			want := 0
			if e.EventID == "keep" {
				want = 1
			}
			if total != 2 || sized != 2 || withBody != 2*want || entryBody != want {
				t.Errorf("entry %s: versions %d (%d with a body, %d with hash and size), entry body %d; want bodies only for 'keep'",
					e.EventID, total, withBody, sized, entryBody)
			}
		}
		vs, err := s.Versions(ctx, es[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if !v.Erased || v.Body != nil {
				t.Errorf("version %d of a discarded entry: erased %v, body %q", v.Version, v.Erased, v.Body)
			}
		}
	})
}

func TestCheckBody(t *testing.T) {
	for _, tt := range []struct {
		ct, body string
		ok       bool
	}{
		{"", "\xff", true}, {ContentBinary, "\xff", true}, {ContentJSON, `{"a":1}`, true}, {ContentJSON, `{"a":`, false},
		{"application/cloudevents+json; charset=utf-8", `[]`, true}, {"application/vnd.x+json", `nope`, false},
		{ContentText, "h\u00e9", true}, {"text/csv", "\xff", false},
		// json.Valid alone takes invalid UTF-8 inside a string (issue 30 item 4).
		{ContentJSON, "{\"a\":\"\xff\"}", false}, {ContentJSON, "{\"a\":\"\xed\xa0\x80\"}", false}, {ContentJSON, "{\"a\":\"\ufffd\u00e9\"}", true},
	} {
		if err := CheckBody(tt.ct, []byte(tt.body)); (err == nil) != tt.ok {
			t.Errorf("CheckBody(%q, %q) = %v, want ok %v", tt.ct, tt.body, err, tt.ok)
		}
	}
}
