package config

import (
	"strings"
	"testing"
)

func TestForeignDLQConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig([]byte(`
[[foreign_dlq]]
queue = "orders_error"
kind = "masstransit"
owner = "team-orders"

[[foreign_dlq]]
queue = "orders_skipped"
kind = "masstransit"

[[foreign_dlq]]
queue = "billing.dead"
kind = "x-death"

[[foreign_dlq]]
queue = "error"
kind = "nservicebus"
`))
	if err != nil {
		t.Fatal(err)
	}
	f, ok := c.ForeignDLQ("orders_error")
	if !ok || f.Kind != ForeignMassTransit || f.Owner != "team-orders" || f.Reason() != "" {
		t.Errorf("orders_error: %+v %v", f, ok)
	}
	if f, _ := c.ForeignDLQ("orders_skipped"); f.Reason() != "skipped" {
		t.Errorf("orders_skipped reason %q, want skipped", f.Reason())
	}
	if len(c.ForeignDLQs) != 4 {
		t.Errorf("%d entries, want 4", len(c.ForeignDLQs))
	}
}

func TestForeignDLQConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := ParseConfig([]byte(`
[[queue]]
name = "orders"

[[foreign_dlq]]
queue = "x"
kind = "rebus"

[[foreign_dlq]]
queue = "x"
kind = "x-death"

[[foreign_dlq]]
kind = "nservicebus"

[[foreign_dlq]]
queue = "orders"
kind = "x-death"

[[foreign_dlq]]
queue = "y"
`))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`queue = "x": kind = "rebus": want`, `queue = "x" is declared twice`, `#3: queue is required`,
		`queue = "orders" is also a [[queue]]`, `queue = "y": kind is required`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestForeignJetStreamConfig: kind = "jetstream" names a stream and a
// consumer (and may name a redrive subject); without them, or with them on
// another kind, the entry is refused with the fix.
func TestForeignJetStreamConfig(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig([]byte(`
[[foreign_dlq]]
queue = "orders.billing"
kind = "jetstream"
stream = "ORDERS"
consumer = "billing"
redrive_subject = "orders.billing.redrive"
`))
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := c.ForeignDLQ("orders.billing"); !ok || f.Kind != ForeignJetStream || f.Stream != "ORDERS" || f.Consumer != "billing" || f.RedriveSubject != "orders.billing.redrive" {
		t.Errorf("orders.billing: %+v %v", f, ok)
	}
	for toml, want := range map[string]string{
		"[[foreign_dlq]]\nqueue = \"q\"\nkind = \"jetstream\"\nstream = \"ORDERS\"\n":                    "needs stream and consumer",
		"[[foreign_dlq]]\nqueue = \"q\"\nkind = \"jetstream\"\nstream = \"OR.DERS\"\nconsumer = \"b\"\n": "no dots",
		"[[foreign_dlq]]\nqueue = \"q\"\nkind = \"x-death\"\nstream = \"ORDERS\"\n":                      `for kind = "jetstream" only`,
		"[[foreign_dlq]]\nqueue = \"q\"\nkind = \"kafka\"\n":                                             `"nservicebus", "jetstream", "azure-functions" or "lambda-destination"`,
	} {
		if _, err := ParseConfig([]byte(toml)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error containing %q", toml, err, want)
		}
	}
}
