package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestExitCodes holds the exit-code convention the README documents:
// 0 done and nothing wrong, 1 a finding or a failure, 2 bad input (with a
// message that names what was wrong). Exit 3, reconcile's "unknown", is
// held by the RabbitMQ reconcile tests, which need a broker without its
// management API.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "lily.db")
	seedSearch(t, db)
	clean := writeConfig(t, "[[queue]]\nname = \"orders\"\nowner = \"shop\"\nretry_attempts = 3\n")
	warned := writeConfig(t, "[[queue]]\nname = \"orders\"\nretry_attempts = 0\n")
	invalid := writeConfig(t, "[[queue]]\nname = \"orders\"\nretry_atempts = 3\n")
	cases := []struct {
		code int
		args []string
		says string // in stderr; "" for exit 0
	}{
		{0, []string{"schedule"}, ""},
		{0, []string{"dlq", "list", "--db", db}, ""},
		{0, []string{"lint", "--config", clean}, ""},
		{0, []string{"lint", "--config", warned}, ""}, // warnings are findings only with --strict
		{1, []string{"lint", "--strict", "--config", warned}, "2 warning(s) (--strict)"},
		{2, []string{"nosuch"}, `unknown command "nosuch"`},
		{2, []string{"dlq", "list", "--db", db, "--bogus"}, "unknown flag: --bogus"},
		{2, []string{"lint", "--config", invalid}, "did you mean retry_attempts?"},
		{2, []string{"dlq", "redrive", "--db", db, "--queue", "ordres", "--dry-run"}, "did you mean orders?"},
		{2, []string{"dlq", "redrive", "--db", db, "--reason", "retries_exhaustd", "--dry-run"}, "did you mean retries_exhausted?"},
		{2, []string{"dlq", "peek", "--db", db, "--queue", "orders", "--state", "bogus"}, `"bogus" is not a state`},
		{2, []string{"dlq", "triage", "--db", db, "--ids", "1", "--status", "bogus", "--actor", "a"}, "want one of investigating"},
		{2, []string{"dlq", "resume", "999", "--db", db}, "no such redrive job"},
		{2, []string{"dlq", "cancel", "999", "--db", db}, "no such redrive job"},
		{2, []string{"dlq", "redrive", "--db", db, "--queue", "orders", "--rate", "abc"}, "--rate"},
		{2, []string{"reconcile", "--db", filepath.Join(dir, "absent.db")}, "no such database file"},
	}
	for _, c := range cases {
		code, _, errOut := run(t, c.args...)
		if code != c.code || (c.says != "" && !strings.Contains(errOut, c.says)) {
			t.Errorf("lily %s: exit %d, stderr %.300q; want exit %d saying %q", strings.Join(c.args, " "), code, errOut, c.code, c.says)
		}
	}
}
