package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

func TestSafeWriterEscapes(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain text\n\tindented", "plain text\n\tindented"},
		{"clear \x1b[2J screen", `clear \u001b[2J screen`},
		{"bell\a cr\r del\x7f nul\x00", `bell\u0007 cr\u000d del\u007f nul\u0000`},
		{"c1 csi \u009b31m", `c1 csi \u009b31m`},
		{"bidi \u202eevil\u202c", `bidi \u202eevil\u202c`},
		{"héllo wörld ✓ 日本", "héllo wörld ✓ 日本"},
	} {
		var b bytes.Buffer
		w := newSafeWriter(&b)
		// Byte by byte too: a rune split across writes is still judged whole.
		for _, chunk := range [][]byte{[]byte(c.in)} {
			if n, err := w.Write(chunk); err != nil || n != len(chunk) {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		if got := b.String(); got != c.want {
			t.Errorf("%q → %q, want %q", c.in, got, c.want)
		}
		b.Reset()
		w = newSafeWriter(&b)
		for i := range len(c.in) {
			w.Write([]byte{c.in[i]})
		}
		w.Flush()
		if got := b.String(); got != c.want {
			t.Errorf("byte by byte %q → %q, want %q", c.in, got, c.want)
		}
	}
	// JSON stays JSON: an escaped C1 or bidi character means the same.
	var b bytes.Buffer
	json.NewEncoder(newSafeWriter(&b)).Encode(map[string]string{"m": "a\u009bb\u202ec"})
	var back map[string]string
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || back["m"] != "a\u009bb\u202ec" {
		t.Errorf("JSON through the safe writer: %s → %v, %v", b.String(), back, err)
	}
}

// A dead letter whose error message and header carry terminal escape
// sequences cannot act on the operator's terminal through show, group,
// peek or audit.
func TestOutputEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, tr := newSeedStore(t)
	if err := tr.Publish(ctx, &transport.PublishParams{Queue: dlqQueue, Messages: []transport.Message{{EventID: "evt-\x1b]0;pwned\x07",
		Key: "k\x1b[2J", Body: []byte("body \x1b[31mred"), Headers: transport.Headers{"x-\x1b[2J": "v\u009b1m"}}}}); err != nil {
		t.Fatal(err)
	}
	deadLetterAll(t, tr, 1, func(_ int, h transport.Headers) evidence.Reason {
		evidence.Record{Reason: evidence.ReasonPermanent, ErrorType: "*errors.errorString", ErrorMessage: "bad \x1b[2J\x1b[H input \u202eevil",
			DeadLetteredAt: time.Now(), ConsumerVersion: "v\x1b[1m"}.Apply(h)
		return evidence.ReasonPermanent
	})
	tr.Close()
	for _, args := range [][]string{
		{"dlq", "show", "1", "--db", db},
		{"dlq", "show", "1", "--db", db, "--json"},
		{"dlq", "peek", "--queue", dlqQueue, "--db", db},
		{"dlq", "group", "--by", "fingerprint", "--db", db},
		{"dlq", "group", "--by", "consumer_version", "--db", db, "--json"},
		{"dlq", "discard", "--db", db, "--ids", "1", "--reason", "r\x1b[2J", "--dry-run"},
		{"audit", "--db", db},
	} {
		code, out, errOut := run(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d %s", args, code, errOut)
		}
		for _, bad := range []string{"\x1b", "\u009b", "\u202e", "\a"} {
			if strings.Contains(out+errOut, bad) {
				t.Errorf("%v printed a raw %q:\n%s", args, bad, out)
			}
		}
		if !strings.Contains(out, `\u001b`) {
			t.Errorf("%v: want the escape sequence shown escaped:\n%s", args, out)
		}
	}
}
