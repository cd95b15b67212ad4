package config

import (
	"strings"
	"testing"
)

func TestKafkaDLTRetention(t *testing.T) {
	c, err := ParseConfig([]byte(`
kafka_dlt_retention_hours = { "a" = 12 }
kafka_dlt_retention_bytes = { "b" = 2097152 }
[[queue]]
name = "a"
transport = "kafka"
[[queue]]
name = "b"
transport = "kafka"
dlq_retention_hours = 100
`))
	if err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string][2]int64{"a": {12, -1}, "b": {100, 2097152}, "unknown": {336, -1}} {
		if h, b := c.KafkaDLTRetention(q); int64(h) != want[0] || b != want[1] {
			t.Errorf("KafkaDLTRetention(%s) = %d h, %d bytes; want %v", q, h, b, want)
		}
	}
	_, err = ParseConfig([]byte(`
kafka_dlt_retention_hours = { "a" = 0, "s" = 5 }
kafka_dlt_retention_bytes = { "a" = -2 }
[[queue]]
name = "a"
transport = "kafka"
[[queue]]
name = "s"
`))
	for _, want := range []string{
		`kafka_dlt_retention_hours: "a" = 0: must be in 1..87600 hours`,
		`kafka_dlt_retention_hours: "s": the queue's transport is "sqlite"`,
		`kafka_dlt_retention_bytes: "a" = -2: must be -1 (no size cap) or at least 1048576 bytes per partition`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}
