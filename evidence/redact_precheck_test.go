package evidence

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lily-mq/lily/internal/soaktest"
)

// precheckFragments build texts that come near every default rule: keywords
// in all cases, separators, URLs, digit runs, and the non-ASCII letters that
// (?i) folds onto ASCII ones (ſ onto s, the Kelvin sign onto k).
var precheckFragments = []string{
	"password", "PassWord", "passwd", "PASSWD", "secret", "SeCrEt", "secret_key", "token", "TOKEN",
	"api_key", "ApiKey", "api-key", "access_key", "private-key", "KEY", "db_", "X-",
	"=", ":", " = ", "\"", "'", "hunter2", "abc.def", " ", ",", ";", "&",
	"bearer", "Bearer", "BEARER", "://", "amqp", "u", "@", "host", "/",
	"4111", "1111", "4111111111111111", "0", "7", "-", "12345678901234567",
	"paſsword", "ſecret", "toKen", "\u212aey", "béarer", "ï", "😀", "\x80",
}

func randomText(rng *rand.Rand) string {
	var b strings.Builder
	for n := rng.IntN(12); n >= 0; n-- {
		b.WriteString(precheckFragments[rng.IntN(len(precheckFragments))])
	}
	return b.String()
}

// TestRedactPrecheckSameResult: skipping the rules whose cheap test says
// they cannot match changes nothing.
func TestRedactPrecheckSameResult(t *testing.T) {
	withExtra, err := NewRedactor(`\b\d{3}-\d{2}-\d{4}\b`, `session=(\w+)`, `(?i)kelvin`)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// The sharp suite's corpus masks a few hundred texts; the soak build's
	// ten times as many (the unpatched regexps cost most of this test's time
	// under -race).
	n := soaktest.Pick(4000, 40000)
	var texts []string
	for range n {
		texts = append(texts, randomText(rng))
	}
	texts = append(texts, "", "plain error", "bench: permanent", "Authorization: Bearer x",
		"paſsword=hunter2", "\u212aey: v", "API_KEY=zz", "https://a:b@c", "4111 1111 1111 1111")
	masked := 0
	for _, r := range []*Redactor{nil, withExtra} {
		for _, s := range texts {
			fast, slow := r.redact(s, true), r.redact(s, false)
			if fast != slow {
				t.Fatalf("redact(%q): with the pre-check %q, without %q", s, fast, slow)
			}
			if fast != s {
				masked++
			}
		}
	}
	if masked < n/20 {
		t.Fatalf("only %d texts were masked: the corpus does not exercise the rules", masked)
	}
}

func FuzzRedactPrecheck(f *testing.F) {
	for _, s := range []string{"password=x", "Bearer t", "amqp://u:p@h", "4111111111111111", "paſsword=x", "\u212aey=v", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if fast, slow := defaultRedactor().redact(s, true), defaultRedactor().redact(s, false); fast != slow {
			t.Fatalf("redact(%q): with the pre-check %q, without %q", s, fast, slow)
		}
	})
}

func BenchmarkRedactNoSecret(b *testing.B) {
	r := defaultRedactor()
	for b.Loop() {
		r.Redact("orders: handle 0190b7f2-3c4d-7e8f: bench: permanent")
	}
}

func BenchmarkRedactNoSecretSlow(b *testing.B) {
	r := defaultRedactor()
	for b.Loop() {
		r.redact("orders: handle 0190b7f2-3c4d-7e8f: bench: permanent", false)
	}
}
