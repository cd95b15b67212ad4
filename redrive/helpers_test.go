package redrive

import (
	"context"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogtest"
)

// The shared fixtures of the catalog's tests (internal/catalogtest), under
// the names these tests had in package catalog.
var (
	testNow         = catalogtest.Now
	entry           = catalogtest.Entry
	seed            = catalogtest.Seed
	evidenceHeaders = catalogtest.EvidenceHeaders
)

func eachStore(t *testing.T, fn func(t *testing.T, s *catalog.Store)) { catalogtest.EachStore(t, fn) }

// fixedNow is the clock of the decisions in these tests.
func fixedNow() time.Time { return testNow.Add(time.Hour) }

// audit returns every audit record.
func audit(t *testing.T, s *catalog.Store, f catalog.AuditFilter) []catalog.AuditRecord {
	t.Helper()
	var out []catalog.AuditRecord
	if err := s.EachAudit(context.Background(), f, func(r *catalog.AuditRecord) error { out = append(out, *r); return nil }); err != nil {
		t.Fatalf("EachAudit: %v", err)
	}
	return out
}

func states(t *testing.T, s *catalog.Store, f catalog.Filter) map[string]catalog.State {
	t.Helper()
	out := map[string]catalog.State{}
	if err := s.Each(context.Background(), f, func(e *catalog.Entry) error { out[e.EventID] = e.State; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}
