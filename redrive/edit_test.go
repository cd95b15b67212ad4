package redrive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/lily-mq/lily/catalog"
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
	eachStore(t, func(t *testing.T, s *catalog.Store) {
		ctx := context.Background()
		a := entry("orders", "e1", evidence.ReasonPermanent, catalog.StatePending, "bad total")
		b := entry("orders", "e2", evidence.ReasonPermanent, catalog.StatePending, "bad total")
		if err := s.Insert(ctx, a, b); err != nil {
			t.Fatal(err)
		}
		orig := append([]byte(nil), a.Body...)
		// Refusals change nothing: no reason, not JSON, same body.
		if _, err := s.Edit(ctx, catalog.EditParams{ID: a.ID, Body: []byte(`{"id":"e1","total":1}`)}); err == nil {
			t.Fatal("edit without a reason accepted")
		}
		if _, err := s.Edit(ctx, catalog.EditParams{ID: a.ID, Body: []byte(`{"id":`), Reason: "fix", ContentType: catalog.ContentJSON}); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
			t.Fatalf("broken JSON: err = %v", err)
		}
		if _, err := s.Edit(ctx, catalog.EditParams{ID: a.ID, Body: orig, Reason: "fix"}); err == nil || !strings.Contains(err.Error(), "same as version 0") {
			t.Fatalf("same body: err = %v", err)
		}
		v1 := []byte(`{"id":"e1","total":1}`)
		r1, err := s.Edit(ctx, catalog.EditParams{ID: a.ID, Body: v1, Reason: "total was a string", ContentType: catalog.ContentJSON, Actor: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if r1.Version != 1 || r1.Previous.BodySHA256 != a.BodySHA256 || r1.Current.BodySHA256 != sha256Hex(v1) {
			t.Fatalf("edit 1 = %+v", r1)
		}
		v2 := []byte(`{"id":"e1","total":2}`)
		if _, err := s.Edit(ctx, catalog.EditParams{ID: a.ID, Body: v2, Reason: "second try", Actor: "bob"}); err != nil {
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
		var edits []*catalog.AuditRecord
		if err := s.EachAudit(ctx, catalog.AuditFilter{}, func(r *catalog.AuditRecord) error {
			if r.Action == catalog.ActionEdit {
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
		res, err := New(s).Redrive(ctx, Params{Filter: catalog.Filter{Queue: "orders"}, Target: func(context.Context, string) (Publisher, error) { return pub, nil }})
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
		if _, err := s.Edit(ctx, catalog.EditParams{ID: a.ID, Body: []byte(`{}`), Reason: "late"}); !errors.Is(err, catalog.ErrNotEditable) {
			t.Fatalf("edit of a redriven entry: %v", err)
		}
	})
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
