package catalog

import (
	"context"
	"strings"
	"testing"

	"github.com/lily-mq/lily/internal/pgtest"
)

// A catalog newer than this Lily is refused with the fix named.
func TestPostgresRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	s, err := OpenPostgres(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO lily_schema_migrations(version, name, applied_at) VALUES (999, 'future', 0)`); err != nil {
		t.Fatal(err)
	}
	_, err = OpenPostgres(ctx, url)
	if err == nil || !strings.Contains(err.Error(), "upgrade Lily") {
		t.Fatalf("OpenPostgres on a newer schema = %v, want refused", err)
	}
}

// On PostgreSQL the audit log refuses TRUNCATE too.
func TestPostgresAuditRefusesTruncate(t *testing.T) {
	ctx := context.Background()
	s, err := OpenPostgres(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.AppendAudit(ctx, &AuditRecord{Op: "op", Actor: "a", Action: ActionDiscard, Outcome: OutcomeDiscarded}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `TRUNCATE lily_audit`); err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Fatalf("TRUNCATE lily_audit = %v, want refused", err)
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM lily_audit`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("audit rows = %d, %v; want 1", n, err)
	}
}

func TestIsPostgresURL(t *testing.T) {
	for s, want := range map[string]bool{"postgres://h/db": true, "postgresql://h/db": true, "lily.db": false, "/tmp/postgres.db": false} {
		if IsPostgresURL(s) != want {
			t.Errorf("IsPostgresURL(%q) = %v", s, !want)
		}
	}
	if got := redactURL("postgres://u:secret@h:5432/db"); strings.Contains(got, "secret") {
		t.Errorf("redactURL kept the password: %s", got)
	}
}
