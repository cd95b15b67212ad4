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
