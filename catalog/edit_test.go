package catalog

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// capture is a Publisher that confirms every publish and keeps the
// messages, as a broker would hold them.
type capture struct {
	mu   sync.Mutex
	msgs []transport.Message
}

func (c *capture) Publish(_ context.Context, p *transport.PublishParams) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, p.Messages...)
	return nil
}

func TestEditStoresVersionsAndRedriveSendsTheLatest(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		a := entry("orders", "e1", evidence.ReasonPermanent, StatePending, "bad total")
		b := entry("orders", "e2", evidence.ReasonPermanent, StatePending, "bad total")
		if err := s.Insert(ctx, a, b); err != nil {
			t.Fatal(err)
		}
		orig := append([]byte(nil), a.Body...)
		// Refusals change nothing: no reason, not JSON, same body.
		if _, err := s.Edit(ctx, EditParams{ID: a.ID, Body: []byte(`{"id":"e1","total":1}`)}); err == nil {
			t.Fatal("edit without a reason accepted")
		}
		if _, err := s.Edit(ctx, EditParams{ID: a.ID, Body: []byte(`{"id":`), Reason: "fix", ContentType: ContentJSON}); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
			t.Fatalf("broken JSON: err = %v", err)
		}
		if _, err := s.Edit(ctx, EditParams{ID: a.ID, Body: orig, Reason: "fix"}); err == nil || !strings.Contains(err.Error(), "same as version 0") {
			t.Fatalf("same body: err = %v", err)
		}
		v1 := []byte(`{"id":"e1","total":1}`)
		r1, err := s.Edit(ctx, EditParams{ID: a.ID, Body: v1, Reason: "total was a string", ContentType: ContentJSON, Actor: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if r1.Version != 1 || r1.Previous.BodySHA256 != a.BodySHA256 || r1.Current.BodySHA256 != sha256Hex(v1) {
			t.Fatalf("edit 1 = %+v", r1)
		}
		v2 := []byte(`{"id":"e1","total":2}`)
		if _, err := s.Edit(ctx, EditParams{ID: a.ID, Body: v2, Reason: "second try", Actor: "bob"}); err != nil {
			t.Fatal(err)
		}
		vs, err := s.Versions(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) != 3 || string(vs[0].Body) != string(orig) || string(vs[1].Body) != string(v1) || string(vs[2].Body) != string(v2) ||
			vs[2].EditedBy != "bob" || vs[2].PrevSHA256 != sha256Hex(v1) {
			t.Fatalf("versions = %+v", vs)
		}
		// The entry keeps its original body and hash.
		got, _ := s.Get(ctx, a.ID)
		if string(got.Body) != string(orig) || got.BodySHA256 != a.BodySHA256 {
			t.Fatalf("entry body changed: %s", got.Body)
		}
		// Both hashes are audited.
		var edits []*AuditRecord
		if err := s.EachAudit(ctx, AuditFilter{}, func(r *AuditRecord) error {
			if r.Action == ActionEdit {
				edits = append(edits, r)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(edits) != 2 || edits[0].Actor != "alice" || !strings.Contains(edits[0].Detail, a.BodySHA256) || !strings.Contains(edits[0].Detail, sha256Hex(v1)) {
			t.Fatalf("audit = %+v", edits)
		}

		pub := &capture{}
		res, err := s.Redrive(ctx, RedriveParams{Filter: Filter{Queue: "orders"}, Target: func(context.Context, string) (Publisher, error) { return pub, nil }})
		if err != nil || res.Redriven != 2 {
			t.Fatalf("redrive = %+v, %v", res, err)
		}
		byID := map[string]transport.Message{}
		for _, m := range pub.msgs {
			byID[m.EventID] = m
		}
		if m := byID["e1"]; string(m.Body) != string(v2) || m.Headers[evidence.HeaderEditedBy] != "bob" ||
			m.Headers[evidence.HeaderEditedVersion] != int32(2) || m.Headers[evidence.HeaderEditedSHA256] != a.BodySHA256 {
			t.Fatalf("edited message = %s %v", m.Body, m.Headers)
		}
		if m := byID["e2"]; string(m.Body) != string(b.Body) || m.Headers[evidence.HeaderEditedBy] != nil {
			t.Fatalf("unedited message = %s %v", m.Body, m.Headers)
		}
		// A redriven entry is no longer editable.
		if _, err := s.Edit(ctx, EditParams{ID: a.ID, Body: []byte(`{}`), Reason: "late"}); !errors.Is(err, ErrNotEditable) {
			t.Fatalf("edit of a redriven entry: %v", err)
		}
	})
}

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
	} {
		if err := CheckBody(tt.ct, []byte(tt.body)); (err == nil) != tt.ok {
			t.Errorf("CheckBody(%q, %q) = %v, want ok %v", tt.ct, tt.body, err, tt.ok)
		}
	}
}
