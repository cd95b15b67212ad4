package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnknownNamesRefused: a mistyped queue or dead-letter reason used to
// select nothing and say so with exit 0 ("nothing to redrive", "no
// entries … in state held"), which reads as an empty DLQ. Every command
// that selects entries now refuses it with exit 2, the nearest known
// name and the known ones, before it changes anything; a queue of the
// configuration with no entry yet, a queue only in the catalog and a
// reason only the catalog's entries carry are accepted.
func TestUnknownNamesRefused(t *testing.T) {
	t.Parallel()
	searchCatalogs(t, func(t *testing.T, flag, db string) {
		cfg := filepath.Join(t.TempDir(), "lily.toml")
		if err := os.WriteFile(cfg, []byte("[[queue]]\nname = \"orders\"\n\n[[queue]]\nname = \"payments.captured\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		refused := []struct {
			args []string
			want []string
		}{
			{[]string{"dlq", "redrive", "--queue", "ordres", "--dry-run"}, []string{"--queue ordres: unknown queue (did you mean orders?)", "billing"}},
			{[]string{"dlq", "redrive", "--queue", "ordres", "--dry-run", "--config", cfg}, []string{"did you mean orders?", "configured: orders, payments.captured", "in the catalog only: billing"}},
			{[]string{"dlq", "peek", "--queue", "orders.craeted"}, []string{"--queue orders.craeted: unknown queue"}},
			{[]string{"dlq", "group", "--by", "source", "--queue", "inventory"}, []string{"unknown queue", "billing, orders"}},
			{[]string{"dlq", "group", "--by", "reason", "--queue", "bilking"}, []string{"did you mean billing?"}},
			{[]string{"dlq", "redrive", "--reason", "retries_exhaustd", "--dry-run"}, []string{"--reason retries_exhaustd: unknown dead-letter reason (did you mean retries_exhausted?)", "known: permanent"}},
			{[]string{"dlq", "discard", "--dead-letter-reason", "permanant", "--reason", "typo test", "--dry-run"}, []string{"--dead-letter-reason permanant", "did you mean permanent?"}},
			{[]string{"dlq", "export", "--out", filepath.Join(t.TempDir(), "x.ndjson"), "--queue", "ordrs"}, []string{"did you mean orders?"}},
			{[]string{"dlq", "search", "timeout", "--queue", "ordrs"}, []string{"unknown queue"}},
			// A flag a command does not have names the command's whole path.
			{[]string{"dlq", "list", "--queue", "orders"}, []string{"dlq list: unknown flag: --queue (see 'lily dlq list --help')"}},
		}
		for _, c := range refused {
			code, out, errOut := run(t, append(c.args, flag, db)...)
			ok := code == 2 && out == ""
			for _, w := range c.want {
				ok = ok && strings.Contains(errOut, w)
			}
			if !ok {
				t.Errorf("lily %s: exit %d, stdout %q, stderr %.400s; want exit 2 naming %q", strings.Join(c.args, " "), code, out, errOut, c.want)
			}
		}
		// Known names select as before: a configured queue without
		// entries, a queue only in the catalog, a known reason.
		for _, args := range [][]string{
			{"dlq", "redrive", "--queue", "payments.captured", "--dry-run", "--config", cfg},
			{"dlq", "group", "--by", "reason", "--queue", "billing"},
			{"dlq", "group", "--by", "source", "--reason", "permanent", "--queue", "orders"},
			{"dlq", "peek", "--queue", "orders"},
		} {
			if code, _, errOut := run(t, append(args, flag, db)...); code != 0 {
				t.Errorf("lily %s: exit %d (%s), want 0", strings.Join(args, " "), code, errOut)
			}
		}
	})
}

// TestBadValuesSayWhatWasWanted: a flag value that does not parse says
// what the flag wants instead of the parser's words, a negative rate
// gives the real range, a database path from the configuration is named
// as the configuration's, and an invalid configuration exits 2.
func TestBadValuesSayWhatWasWanted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "lily.toml")
	missing := filepath.Join(dir, "missing", "lily.db")
	if err := os.WriteFile(cfg, []byte("db = \""+missing+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "other.db")
	typo := filepath.Join(dir, "typo.toml")
	if err := os.WriteFile(typo, []byte("[[queue]]\nname = \"orders\"\nretry_atempts = 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "redrive", "--rate", "abc", "--db", db}, `dlq redrive: --rate "abc": want a number, e.g. 50 or 2.5 (see 'lily dlq redrive --help')`},
		{[]string{"dlq", "redrive", "--rate", "-5", "--db", db}, "--rate -5: must be 0 or more messages per second (0: as fast as the transport confirms)"},
		{[]string{"dlq", "peek", "--queue", "orders", "--limit", "1e3", "--db", db}, `--limit "1e3": want a whole number`},
		{[]string{"dlq", "redrive", "--limit", "99999999999999999999", "--db", db}, "--limit 99999999999999999999: out of range"},
		{[]string{"dlq", "peek", "--queue", "orders", "--config", cfg}, `db = "` + missing + `" (from --config ` + cfg + `): no such database file`},
		// An invalid configuration is bad input (2), not a lint finding (1).
		{[]string{"lint", "--config", typo}, "retry_atempts: unknown field (line 3): did you mean retry_attempts?"},
		{[]string{"dlq", "group", "--by", "reason", "--config", typo}, "did you mean retry_attempts?"},
	} {
		code, out, errOut := run(t, c.args...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "strconv") {
			t.Errorf("lily %s: exit %d, stderr %q; want exit 2 and %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
	if _, err := os.Stat(db); err == nil {
		t.Errorf("a refused command left %s behind", db)
	}
}
