package catalogdb

import "testing"

func TestRebind(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`a = ? AND b = ?`, `a = $1 AND b = $2`},
		{`x = '?' AND y = ?`, `x = '?' AND y = $1`},
		{`SET a = ?1, b = ?2 WHERE id IN (?, ?)`, `SET a = $1, b = $2 WHERE id IN ($3, $4)`},
		{`VALUES (?1, ?2, ?2, ?10) AND ?`, `VALUES ($1, $2, $2, $10) AND $11`},
		{`"we?ird" = ?`, `"we?ird" = $1`},
	} {
		if got := Postgres.Rebind(c.in); got != c.want {
			t.Errorf("rebind(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := SQLite.Rebind(c.in); got != c.in {
			t.Errorf("sqlite rebind(%q) = %q, want it unchanged", c.in, got)
		}
	}
}
