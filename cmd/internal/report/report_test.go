package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/lily-mq/lily/ledger"
)

func TestLedgerTable(t *testing.T) {
	var b bytes.Buffer
	Ledger(&b, []ledger.Row{{Queue: "orders", Accepted: 10, Acked: 7, DeadLettered: 2, InFlight: 1, InFlightUnacked: 1}})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "queue") || strings.Join(strings.Fields(lines[1]), " ") != "orders 10 7 2 0 1 (0 0 1 0) 0" {
		t.Errorf("ledger table:\n%s", b.String())
	}
}

func TestRedactedURL(t *testing.T) {
	for in, want := range map[string]string{
		"amqp://guest:secret@host:5672/": "amqp://guest:xxxxx@host:5672/",
		"postgres://host/db":             "postgres://host/db",
		"://bad":                         "<invalid URL>",
	} {
		if got := RedactedURL(in); got != want {
			t.Errorf("RedactedURL(%q) = %q, want %q", in, got, want)
		}
	}
}
