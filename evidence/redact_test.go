package evidence

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	tests := []struct {
		s    string
		max  int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"", 0, ""},
		{"hello", 0, ""},
		{"hello", -1, ""},
		{"hello", 3, "hel"}, // shorter than the suffix: cut without it
		{strings.Repeat("a", 20), 15, "a" + TruncatedSuffix}, // the suffix is 14 bytes
		{strings.Repeat("a", 20), 14, TruncatedSuffix},
		// "ş" is 2 bytes: cutting after 3 bytes of "aşb…" would split it.
		{"aaşbbbbbbbbbbbbbbbbbb", 17, "aa" + TruncatedSuffix},
		{"aaşbbbbbbbbbbbbbbbbbb", 18, "aaş" + TruncatedSuffix},
		// "ไ" is 3 bytes, "😀" 4.
		{"ไไไไไไไไไ", 16, "" + TruncatedSuffix},
		{"ไไไไไไไไไ", 17, "ไ" + TruncatedSuffix},
		{"😀😀😀😀😀😀", 21, "😀" + TruncatedSuffix},
		{"😀😀😀😀😀😀", 20, "😀" + TruncatedSuffix},
		{"😀😀😀😀😀😀", 17, "" + TruncatedSuffix},
		{"😀😀", 3, ""},
		{"😀😀", 4, "😀"},
		{"😀😀", 7, "😀"},
	}
	for _, tt := range tests {
		got := Truncate(tt.s, tt.max)
		if got != tt.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tt.s, tt.max, got, tt.want)
		}
		if tt.max >= 0 && len(got) > tt.max {
			t.Errorf("Truncate(%q, %d) is %d bytes", tt.s, tt.max, len(got))
		}
	}
}

func TestTruncateAlwaysValidUTF8(t *testing.T) {
	s := strings.Repeat("aşไ😀", 50)
	for max := 0; max <= len(s)+1; max++ {
		got := Truncate(s, max)
		if !utf8.ValidString(got) {
			t.Fatalf("Truncate(_, %d) = %q: invalid UTF-8", max, got)
		}
		if len(got) > max {
			t.Fatalf("Truncate(_, %d) is %d bytes", max, len(got))
		}
		if max < len(s) && max >= len(TruncatedSuffix) && !strings.HasSuffix(got, TruncatedSuffix) {
			t.Fatalf("Truncate(_, %d) = %q: no marker", max, got)
		}
		// Never more than a rune's worth of room is wasted.
		if max < len(s) && max >= len(TruncatedSuffix) && max-len(got) >= utf8.UTFMax {
			t.Fatalf("Truncate(_, %d) = %d bytes: cut too much", max, len(got))
		}
	}
	// Invalid UTF-8 input does not panic.
	_ = Truncate(strings.Repeat("\x80", 40), 20)
}

func TestRedactDefaults(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		// URL credentials.
		{"dial amqp://guest:guest@127.0.0.1:5672/: refused", "dial amqp://guest:***@127.0.0.1:5672/: refused"},
		{"postgres://app:s3cr3t!@db.internal/app?sslmode=disable", "postgres://app:***@db.internal/app?sslmode=disable"},
		{"redis://:hunter2@cache:6379", "redis://:***@cache:6379"},
		{"AMQPS://u:p@ss@host/vh", "AMQPS://u:***@host/vh"},
		{"see https://example.com/a@b", "see https://example.com/a@b"},
		// Bearer tokens.
		{"Authorization: Bearer eyJhbGciOi.eyJzdWIi.SflKxw", "Authorization: Bearer ***"},
		{"got bearer abc123== from cache", "got bearer *** from cache"},
		// Secret pairs.
		{"login failed password=hunter2 user=bob", "login failed password=*** user=bob"},
		{"PASSWORD: hunter2", "PASSWORD: ***"},
		{`{"password":"hunter 2","user":"bob"}`, `{"password":"***","user":"bob"}`},
		{"secret='abc def'", "secret='***'"},
		{"db_password=x;host=y", "db_password=***;host=y"},
		{"GET /cb?code=1&access_token=abc.def&state=2", "GET /cb?code=1&access_token=***&state=2"},
		{"api_key=AKIA123 apikey:zzz X-Api-Key: qqq", "api_key=*** apikey:*** X-Api-Key: ***"},
		{"client_secret = 's'", "client_secret = '***'"},
		{"aws_secret_access_key=abcd", "aws_secret_access_key=***"},
		{"Token=abc", "Token=***"},
		{"tokenizer: unexpected EOF", "tokenizer: unexpected EOF"},
		{"3 tokens left", "3 tokens left"},
		// Card numbers (Luhn-valid) and ordinary long numbers.
		{"card 4111111111111111 declined", "card ****1111 declined"},
		{"card 4111 1111 1111 1111 declined", "card ****1111 declined"},
		{"card 5555-5555-5555-4444.", "card ****4444."},
		{"amex 378282246310005", "amex ****0005"},
		{"order 4111111111111112 not found", "order 4111111111111112 not found"},
		{"order 1234567890123 not found", "order 1234567890123 not found"},
		{"card 4111 1111 1111 1111 12 times", "card ****1111 12 times"},
		{"zeros 0000000000000000", "zeros 0000000000000000"},
		{"short 79927398713", "short 79927398713"},
		{"twenty 41111111111111111111", "twenty 41111111111111111111"},
		// Nothing to do.
		{"order 12345 not found", "order 12345 not found"},
		{"", ""},
	}
	r, err := NewRedactor()
	if err != nil {
		t.Fatal(err)
	}
	var nilR *Redactor
	for _, tt := range tests {
		if got := r.Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
		if got := nilR.Redact(tt.in); got != tt.want {
			t.Errorf("nil Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestLuhn(t *testing.T) {
	for _, d := range []string{"4111111111111111", "5555555555554444", "378282246310005", "6011111111111117", "79927398713", "4242424242424242"} {
		if !luhn(d) {
			t.Errorf("luhn(%s) = false", d)
		}
	}
	for _, d := range []string{"4111111111111112", "1234567890123", "79927398710", "0000000000000"} {
		if luhn(d) {
			t.Errorf("luhn(%s) = true", d)
		}
	}
}

func TestRedactExtra(t *testing.T) {
	r, err := NewRedactor(`\b\d{3}-\d{2}-\d{4}\b`, `session=(\w+)`)
	if err != nil {
		t.Fatal(err)
	}
	got := r.Redact("ssn 123-45-6789 session=abc; password=x")
	want := "ssn *** session=***; password=***"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// An optional group that did not take part replaces the whole match.
	r, err = NewRedactor(`id:(\d+)?x`)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Redact("id:x id:12x"); got != "*** id:***x" {
		t.Errorf("got %q", got)
	}
	// Patterns matching the empty string change nothing.
	r, err = NewRedactor(`a*`)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Redact("bab"); got != "b***b" {
		t.Errorf("got %q", got)
	}
}

func TestNewRedactorBadPattern(t *testing.T) {
	for _, p := range []string{`(unclosed`, ``, `a{2,1}`} {
		_, err := NewRedactor(`ok`, p)
		if err == nil {
			t.Errorf("NewRedactor(%q): nil error", p)
			continue
		}
		if !errors.Is(err, ErrInvalidPattern) {
			t.Errorf("error %v does not wrap ErrInvalidPattern", err)
		}
		if !strings.Contains(err.Error(), "\""+p+"\"") {
			t.Errorf("error %q does not name the pattern %q", err, p)
		}
	}
}

func TestScrub(t *testing.T) {
	stack := "panic: password=hunter2\n" + strings.Repeat("frame\n", 2000)
	rec := Record{
		ErrorMessage: "connect amqp://app:pw@mq failed: " + strings.Repeat("é", 1000),
		ErrorStack:   stack,
		Source:       "amqp://app:pw@mq", // not error text: untouched
	}
	for _, r := range []*Redactor{nil, mustRedactor(t)} {
		got := rec
		r.Scrub(&got)
		if !strings.HasPrefix(got.ErrorMessage, "connect amqp://app:***@mq failed: ") {
			t.Errorf("message not redacted: %.60q", got.ErrorMessage)
		}
		if len(got.ErrorMessage) > MaxErrorMessageBytes || !strings.HasSuffix(got.ErrorMessage, TruncatedSuffix) || !utf8.ValidString(got.ErrorMessage) {
			t.Errorf("message: %d bytes, valid %v", len(got.ErrorMessage), utf8.ValidString(got.ErrorMessage))
		}
		if !strings.HasPrefix(got.ErrorStack, "panic: password=***\n") || len(got.ErrorStack) > MaxErrorStackBytes || !strings.HasSuffix(got.ErrorStack, TruncatedSuffix) {
			t.Errorf("stack: %d bytes, %.40q", len(got.ErrorStack), got.ErrorStack)
		}
		if got.Source != rec.Source {
			t.Errorf("Source changed: %q", got.Source)
		}
	}
	// Short text is only redacted.
	small := Record{ErrorMessage: "token=abc"}
	mustRedactor(t).Scrub(&small)
	if small.ErrorMessage != "token=***" {
		t.Errorf("got %q", small.ErrorMessage)
	}
	mustRedactor(t).Scrub(nil) // no panic
}

func mustRedactor(t *testing.T) *Redactor {
	t.Helper()
	r, err := NewRedactor()
	if err != nil {
		t.Fatal(err)
	}
	return r
}
