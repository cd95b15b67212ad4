package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestZeroIsRefusedWhereIllegal: every numeric key whose 0 is out of range,
// written as 0, is refused by ParseConfig, naming the key, the value 0 and
// the range (cmp.Or used to turn each 0 into the default and accept it).
func TestZeroIsRefusedWhereIllegal(t *testing.T) {
	for _, tc := range []struct{ key, rule string }{
		{"delivery_limit", "1..1000"},
		{"retry_backoff_millis", "> 0"},
		{"max_retry_backoff_millis", ">= retry_backoff_millis (1000)"},
		{"handler_timeout_millis", "> 0"},
		{"dlq_retention_hours", "> 0"},
		{"bucket_max_length", ">= 1"},
		{"dlq_max_length", ">= 1"},
		{"breaker_failure_ratio", "(0, 1]"},
		{"breaker_min_requests", ">= 1"},
		{"breaker_window_millis", "> 0"},
		{"breaker_cooldown_millis", "> 0"},
		{"kafka_partitions", "1..10000"},
	} {
		t.Run(tc.key, func(t *testing.T) {
			doc := fmt.Sprintf("[[queue]]\nname = \"orders.created\"\n%s = 0\n", tc.key)
			if tc.key == "kafka_partitions" {
				doc = "kafka_partitions = 0\n[[queue]]\nname = \"orders.created\"\n"
			}
			_, err := ParseConfig([]byte(doc))
			if err == nil {
				t.Fatalf("%s = 0 was accepted", tc.key)
			}
			msg := err.Error()
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("error does not wrap ErrInvalidConfig: %v", err)
			}
			if !strings.Contains(msg, tc.key+" = 0") && !strings.Contains(msg, tc.key+" 0") {
				t.Errorf("error does not name %s and the value 0: %s", tc.key, msg)
			}
			if !strings.Contains(msg, tc.rule) {
				t.Errorf("error does not give the range %q: %s", tc.rule, msg)
			}
		})
	}
}

// TestZeroIsKeptWhereLegal: max_redrives = 0 and immediate_retry_millis = 0
// are legal and mean what they say (they used to become 2 and 200); an
// absent key still gets its default.
func TestZeroIsKeptWhereLegal(t *testing.T) {
	c, err := ParseConfig([]byte(`
[[queue]]
name = "orders.created"
max_redrives = 0
immediate_retries = 2
immediate_retry_millis = 0

[[queue]]
name = "payments"
`))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Queues[0].Settings()
	if s.MaxRedrives != 0 || *c.Queues[0].MaxRedrives != 0 {
		t.Errorf("max_redrives = 0 became %d", s.MaxRedrives)
	}
	if s.ImmediateRetryMillis != 0 {
		t.Errorf("immediate_retry_millis = 0 became %d", s.ImmediateRetryMillis)
	}
	d := c.Queues[1].Settings()
	if d.MaxRedrives != 2 || d.ImmediateRetryMillis != 200 {
		t.Errorf("absent keys: max_redrives %d, immediate_retry_millis %d, want the defaults 2 and 200", d.MaxRedrives, d.ImmediateRetryMillis)
	}
}
