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
