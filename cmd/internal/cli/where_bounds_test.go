package cli

import (
	"strings"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/catalog/where"
)

// orChain is an or-chain of n comparisons.
func orChain(n int) string {
	terms := make([]string, n)
	for i := range terms {
		terms[i] = `.customer.id == "x` + strings.Repeat("9", i%7) + `"`
	}
	return strings.Join(terms, " or ")
}

// TestWhereAndSearchBounds (issue 30 item 4): input that used to reach the
// database as a raw SQL error with exit 1 (SQLite "Expression tree is too
// large", PostgreSQL "stack depth limit exceeded" and "invalid byte
// sequence for encoding UTF8") is refused before any SQL with exit 2,
// naming the limit; within the limits every command runs on both stores.
func TestWhereAndSearchBounds(t *testing.T) {
	t.Parallel()
	searchCatalogs(t, func(t *testing.T, flag, db string) {
		long := strings.Repeat(`.a == 1 or `, 999) + `.a == 1`
		refused := []struct {
			args []string
			want string
		}{
			{[]string{"dlq", "list", "--where", orChain(1000)}, "where.MaxLength"},                                                               // 4096 bytes first
			{[]string{"dlq", "group", "--by", "reason", "--where", long[:where.MaxLength-8]}, "where.MaxTerms"},                                  // under the length bound
			{[]string{"dlq", "peek", "--queue", "orders", "--where", strings.Repeat("not ", 300) + `exists(.a)`}, "where.MaxDepth"},              // deep not
			{[]string{"dlq", "peek", "--queue", "orders", "--where", strings.Repeat("(", 40) + ".a == 1" + strings.Repeat(")", 40)}, "MaxDepth"}, // deep parentheses
			{[]string{"dlq", "list", "--where", `.name == "a` + "\x00" + `b"`}, "NUL byte"},
			{[]string{"dlq", "list", "--where", `.name == "a\u0000b"`}, `NUL character (\u0000)`},
			{[]string{"dlq", "list", "--where", ".name == \"a\xffb\""}, "not valid UTF-8"},
			{[]string{"dlq", "search", strings.Repeat("word ", 20000)}, "catalog.MaxSearchTokens"},
			{[]string{"dlq", "export", "--out", t.TempDir() + "/x.ndjson", "--where", long[:where.MaxLength-8]}, "where.MaxTerms"},
		}
		for _, c := range refused {
			code, out, errOut := run(t, append(c.args, flag, db)...)
			if code != 2 || !strings.Contains(errOut, c.want) || strings.Contains(errOut, "SQLSTATE") || strings.Contains(errOut, "too large") || out != "" {
				t.Errorf("lily %.80s: exit %d, stderr %.300s; want exit 2 naming %q", strings.Join(c.args, " "), code, errOut, c.want)
			}
		}
		// At the bounds: MaxTerms comparisons, MaxDepth nesting and
		// MaxSearchTokens words run on both stores.
		atTerms := orChain(where.MaxTerms-1) + ` or .customer.id == "42"`
		if len(atTerms) > where.MaxLength {
			t.Fatalf("test expression of %d bytes", len(atTerms))
		}
		if out := mustRun(t, "dlq", "list", "--where", atTerms, flag, db, "--json"); !strings.Contains(out, `"matching": 2`) {
			t.Errorf("list --where of %d terms:\n%s", where.MaxTerms, out)
		}
		deep := strings.Repeat("not ", where.MaxDepth) + `.customer.id == "42"` // even: a double negation
		if out := mustRun(t, "dlq", "list", "--where", deep, flag, db, "--json"); !strings.Contains(out, `"matching": 2`) {
			t.Errorf("list --where nested %d deep:\n%s", where.MaxDepth, out)
		}
		words := strings.TrimSpace(strings.Repeat("gateway ", catalog.MaxSearchTokens-1) + "timeout")
		if out := mustRun(t, "dlq", "search", words, flag, db, "--json"); !strings.Contains(out, `"o-1"`) || !strings.Contains(out, `"b-1"`) {
			t.Errorf("search of %d words:\n%s", catalog.MaxSearchTokens, out)
		}
	})
}
