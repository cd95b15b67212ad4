package azqueue

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/lily-mq/lily/transport"
)

// TestEnvelopeKeepsBodies: every body comes back byte for byte — text as
// text (readable in the JSON), anything XML cannot carry as base64 — with
// its identity and typed headers.
func TestEnvelopeKeepsBodies(t *testing.T) {
	bodies := map[string][]byte{
		"json":      []byte(`{"order":1,"note":"<a & b>"}`),
		"controls":  []byte("tab\tnul\x00bell\x07"),
		"binary":    {0xff, 0xfe, 0x00, 0x80},
		"nonxml":    []byte("ok \uFFFE not XML"),
		"empty":     {},
		"unicode":   []byte("héllo ünïcode \u2028"),
		"envelopey": []byte(`{"lily_envelope":1,"body":"inner"}`),
	}
	h := transport.Headers{"tenant": "acme", "n": int32(7), "raw": []byte{1, 2}}
	for name, b := range bodies {
		text, err := encode("ev-"+name, "k", "t", b, h, 3)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		d, err := decode(text)
		if err != nil || !d.Envelope {
			t.Fatalf("%s: decode %q: envelope %v, %v", name, text, d.Envelope, err)
		}
		if !bytes.Equal(d.Body, b) || d.EventID != "ev-"+name || d.Key != "k" || d.Type != "t" || d.Base != 3 {
			t.Errorf("%s: got %q %s %s %s base %d, want %q", name, d.Body, d.EventID, d.Key, d.Type, d.Base, b)
		}
		if d.Headers["n"] != int32(7) || d.Headers["tenant"] != "acme" {
			t.Errorf("%s: headers %v", name, d.Headers)
		}
		base64d := strings.Contains(text, `"body_base64"`)
		if want := name == "binary" || name == "nonxml"; base64d != want {
			t.Errorf("%s: base64 %v, want %v: %s", name, base64d, want, text)
		}
	}
}

// TestForeignTextIsTheBody: what is not an envelope — plain text, JSON
// without the version field, an envelope of another version — is a
// foreign message whose text is its body.
func TestForeignTextIsTheBody(t *testing.T) {
	for _, text := range []string{"plain", `{"order":1}`, `{"lily_envelope":"x"`, ""} {
		d, _ := decode(text)
		if d.Envelope || string(d.Body) != text {
			t.Errorf("decode %q: envelope %v body %q, want foreign text", text, d.Envelope, d.Body)
		}
	}
	d, err := decode(`{"lily_envelope":2,"body":"x"}`)
	if d.Envelope || err == nil || string(d.Body) != `{"lily_envelope":2,"body":"x"}` {
		t.Errorf("version 2: envelope %v err %v, want foreign text and an error naming the version", d.Envelope, err)
	}
}

// TestStorageNames: Lily names map to names the service takes, the DLQ
// and Functions' poison queue beside them; long names stay distinct.
func TestStorageNames(t *testing.T) {
	cases := map[string]string{"orders.created": "orders-created", "Orders__X.y": "orders-x-y", "a.-b": "a-b"}
	for in, want := range cases {
		if got := QueueName(in); got != want {
			t.Errorf("QueueName(%q) = %q, want %q", in, got, want)
		}
	}
	if DeadLetterQueue("orders.created") != "orders-created-dlq" || PoisonQueue("orders.created") != "orders-created-poison" {
		t.Errorf("DLQ %q poison %q", DeadLetterQueue("orders.created"), PoisonQueue("orders.created"))
	}
	long1, long2 := strings.Repeat("x", 70)+".one", strings.Repeat("x", 70)+".two"
	for _, n := range []string{QueueName(long1), DeadLetterQueue(long1), QueueName(long2)} {
		if len(n) > 63 {
			t.Errorf("%q: %d characters, over 63", n, len(n))
		}
	}
	if QueueName(long1) == QueueName(long2) || !strings.HasSuffix(DeadLetterQueue(long1), "-dlq") {
		t.Errorf("long names: %q %q %q", QueueName(long1), QueueName(long2), DeadLetterQueue(long1))
	}
	if err := CheckQueueName("ab"); err == nil {
		t.Error("a 2-character name was accepted")
	}
}

// TestLongRetryDelayRefused: a retry delay over the 7-day visibility limit
// is a configuration error naming the queue, the limit and the fix, and
// Settle refuses it too (the original kept).
func TestLongRetryDelayRefused(t *testing.T) {
	err := CheckSpec(transport.QueueSpec{Name: "orders.slow", BucketsMillis: []int64{60000, 8 * 24 * 3600 * 1000}})
	if err == nil || !strings.Contains(err.Error(), "orders.slow") || !strings.Contains(err.Error(), "604800000") {
		t.Errorf("CheckSpec with an 8-day delay: %v, want an error naming the queue and the fix", err)
	}
	if err := CheckSpec(transport.QueueSpec{Name: "orders.ok", BucketsMillis: []int64{7 * 24 * 3600 * 1000}}); err != nil {
		t.Errorf("a 7-day delay: %v", err)
	}
	tr, err := Open(Options{ServiceURL: "http://127.0.0.1:1/none"})
	if err != nil {
		t.Fatal(err)
	}
	d := &transport.Delivery{Message: transport.Message{EventID: "e"}, Receipt: &receipt{queue: "q", name: "q"}}
	err = tr.Settle(context.Background(), &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: d, Action: transport.Retry, Delay: MaxVisibility + 1}}})
	if err == nil || !strings.Contains(err.Error(), "visibility limit") || !strings.Contains(err.Error(), "original kept") {
		t.Errorf("settle with an 8-day delay: %v", err)
	}
}
