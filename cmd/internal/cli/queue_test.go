package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lily-mq/lily/catalog"
)

// TestQueuePauseResume: 'lily queue pause|resume' pause and resume a
// configured queue with an audit record each, say when nothing changed,
// and refuse an unknown queue (exit 2, naming the configured ones) or a
// missing --queue without writing anything.
func TestQueuePauseResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := filepath.Join(dir, "lily.db")
	cat, err := catalog.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	cat.Close()
	cfg := filepath.Join(dir, "lily.toml")
	if err := os.WriteFile(cfg, []byte("[[queue]]\nname = \"orders.created\"\n\n[[queue]]\nname = \"payments\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--config", cfg, "--db", db, "--actor", "alice"}

	code, out, errOut := run(t, append([]string{"queue", "pause", "--queue", "orders.craeted", "--reason", "x"}, base...)...)
	if code != 2 || !strings.Contains(errOut, "--queue orders.craeted: unknown queue (did you mean orders.created?)") || !strings.Contains(errOut, "configured: orders.created, payments") {
		t.Errorf("pause of an unknown queue: exit %d, stderr %q; want 2 naming the configured queues", code, errOut)
	}
	if code, _, errOut := run(t, append([]string{"queue", "resume"}, base...)...); code != 2 || !strings.Contains(errOut, "--queue is required") {
		t.Errorf("resume without --queue: exit %d, stderr %q; want 2", code, errOut)
	}

	code, out, errOut = run(t, append([]string{"queue", "pause", "--queue", "orders.created", "--reason", "payments API maintenance", "--json"}, base...)...)
	var got queuePauseJSON
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || !got.Changed || !got.Paused || got.Actor != "alice" || got.Reason != "payments API maintenance" {
		t.Fatalf("pause: exit %d, out %q, stderr %q", code, out, errOut)
	}
	if code, out, _ := run(t, append([]string{"queue", "pause", "--queue", "orders.created"}, base...)...); code != 0 || !strings.Contains(out, "already paused") || !strings.Contains(out, "payments API maintenance") {
		t.Errorf("second pause: exit %d, out %q; want 0 saying it was already paused, and why", code, out)
	}
	if code, out, _ := run(t, append([]string{"queue", "resume", "--queue", "orders.created"}, base...)...); code != 0 || !strings.Contains(out, "orders.created resumed") {
		t.Errorf("resume: exit %d, out %q", code, out)
	}
	if code, out, _ := run(t, append([]string{"queue", "resume", "--queue", "orders.created"}, base...)...); code != 0 || !strings.Contains(out, "was not paused") {
		t.Errorf("second resume: exit %d, out %q", code, out)
	}

	cat, err = catalog.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	if ps, err := cat.Pauses(ctx); err != nil || len(ps) != 0 {
		t.Errorf("pauses at the end = %+v, %v; want none", ps, err)
	}
	var audit []string
	err = cat.EachAudit(ctx, catalog.AuditFilter{}, func(r *catalog.AuditRecord) error {
		audit = append(audit, r.Actor+" "+r.Action+" "+r.Outcome+" "+r.Detail)
		return nil
	})
	want := []string{"alice pause paused payments API maintenance", "alice pause already_paused ", "alice resume resumed ", "alice resume not_paused "}
	if err != nil || strings.Join(audit, "|") != strings.Join(want, "|") {
		t.Errorf("audit = %q, %v; want %q (nothing for the refused requests)", audit, err, want)
	}
}
