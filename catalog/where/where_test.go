package where

import (
	"errors"
	"strings"
	"testing"
)

func TestParseWhereErrors(t *testing.T) {
	cases := map[string]string{
		``:                     "column 1: expected an expression",
		`.a = 1`:               `column 4: "=" is not an operator`,
		`.a == `:               "column 7: expected a literal",
		`.a > "x"`:             `column 6: expected a number (> compares numbers only), got "\"x\""`,
		`.a == 1 and`:          "column 12: expected a field path",
		`.a == 1 .b == 2`:      `column 9: expected "and", "or" or the end of the expression, got ".b"`,
		`customer.id == "1"`:   `column 1: expected a field path (.name)`,
		`.a[x] == 1`:           `column 3: an array index is [digits]`,
		`.a == "unterminated`:  "column 7: the string is not closed",
		`(.a == 1`:             `column 9: expected ")"`,
		`exists .a`:            `column 8: expected "(" after exists`,
		`. == 1`:               `column 2: a field name after "."`,
		`.a == 1 and .b == 0x`: `column 20: expected "and", "or" or the end`,
	}
	for in, want := range cases {
		_, err := Parse(in)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

// TestParseBounds: the size, depth and value bounds are checked by Parse,
// before any SQL, and name the limit; at the limit an expression parses.
func TestParseBounds(t *testing.T) {
	chain := func(n int) string { return strings.TrimSuffix(strings.Repeat(".a == 1 or ", n), " or ") }
	ok := []string{
		chain(MaxTerms),
		strings.Repeat("not ", MaxDepth) + ".a == 1",
		strings.Repeat("(", MaxDepth) + ".a == 1" + strings.Repeat(")", MaxDepth),
		`.name == "a\u00e9"`,
	}
	for _, in := range ok {
		if _, err := Parse(in); err != nil {
			t.Errorf("Parse(%.60q): %v", in, err)
		}
	}
	refused := map[string]string{
		chain(MaxTerms + 1): "more than 100 comparisons (where.MaxTerms)",
		strings.Repeat("exists(.a) and ", MaxTerms) + "exists(.b)":                    "where.MaxTerms",
		strings.Repeat("not ", MaxDepth+1) + ".a == 1":                                "nested deeper than 16",
		strings.Repeat("(", MaxDepth+1) + ".a == 1" + strings.Repeat(")", MaxDepth+1): "where.MaxDepth",
		".a == 1 or " + strings.Repeat(" ", MaxLength):                                "at most 4096 bytes (where.MaxLength)",
		".name == \"a\x00\"":      "column 12: a NUL byte",
		`.name == "a\u0000"`:      `NUL character (\u0000)`,
		`."a` + "\x00" + `" == 1`: "a NUL byte",
		".name == \"\xff\"":       "not valid UTF-8",
	}
	for in, want := range refused {
		_, err := Parse(in)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%.60q) = %v, want an error containing %q", in, err, want)
		}
	}
}
