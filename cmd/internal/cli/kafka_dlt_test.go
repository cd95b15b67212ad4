package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// The dead-letter topic's retention on kfake: a DLT left by an older Lily
// (retention.ms -1, no size cap, week-long segments) is reported by
// verify and by lint --live; apply sets what the configuration declares
// (kafka_dlt_retention_hours, kafka_dlt_retention_bytes; by default the
// queue's dlq_retention_hours); then verify and lint --live are clean. A
// DLT retention longer than the catalog's is a static lint warning, and a
// DLT kept forever is refused by the configuration.
func TestKafkaDLTRetention(t *testing.T) {
	t.Parallel()
	cluster, brokers := newKafka(t)
	base := fmt.Sprintf(`
kafka_brokers = [%q]
kafka_partitions = 2
%%s
[[queue]]
name = "pay.captured"
transport = "kafka"
owner = "payments"
retry_attempts = 2
dlq_retention_hours = 72
[[queue]]
name = "pay.refunded"
transport = "kafka"
owner = "payments"
retry_attempts = 2
dlq_retention_hours = 48
`, brokers)
	cfg := writeConfig(t, fmt.Sprintf(base, `kafka_dlt_retention_hours = { "pay.captured" = 24 }
kafka_dlt_retention_bytes = { "pay.captured" = 1073741824 }`))
	// The DLT of pay.captured exists, as an older Lily declared it.
	if err := cluster.CreateTopic("pay.captured", 2, nil); err != nil {
		t.Fatal(err)
	}
	if err := cluster.CreateTopic("pay.captured.dlt", 2, map[string]string{"retention.ms": "-1"}); err != nil {
		t.Fatal(err)
	}
	code, out, _ := run(t, "topology", "verify", "--config", cfg)
	for _, w := range []string{
		"topic pay.captured.dlt (dlt of pay.captured): retention.ms = -1, want 86400000; 'lily topology apply' sets it",
		"topic pay.captured.dlt (dlt of pay.captured): retention.bytes = -1, want 1073741824",
		"topic pay.captured.dlt (dlt of pay.captured): segment.ms = 604800000, want 3600000",
	} {
		if code != 1 || !strings.Contains(out, w) {
			t.Errorf("verify: exit %d, lacks %q:\n%s", code, w, out)
		}
	}
	code, out, errOut := run(t, "lint", "--config", cfg, "--live", "--json")
	if code != 0 || !strings.Contains(out, `"code": "dlt-outlives-catalog"`) || !strings.Contains(out, "topic pay.captured.dlt keeps records forever (retention.ms = -1)") {
		t.Errorf("lint --live before apply: %d %s %s", code, out, errOut)
	}
	if code, _, _ := run(t, "lint", "--config", cfg, "--live", "--strict"); code != 1 {
		t.Errorf("lint --live --strict before apply: exit %d, want 1 (a warning)", code)
	}

	if code, out, errOut := run(t, "topology", "apply", "--config", cfg); code != 0 {
		t.Fatalf("apply: %d %s %s", code, out, errOut)
	}
	k := openTestKafka(t, brokers)
	ctx := context.Background()
	for topic, want := range map[string]map[string]string{
		"pay.captured.dlt": {"retention.ms": "86400000", "retention.bytes": "1073741824", "segment.ms": "3600000"},
		"pay.refunded.dlt": {"retention.ms": "172800000", "retention.bytes": "-1", "segment.ms": "3600000"}, // dlq_retention_hours = 48
	} {
		got, err := k.TopicConfigs(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		for key, v := range want {
			if got[key] != v {
				t.Errorf("%s %s = %q, want %q", topic, key, got[key], v)
			}
		}
	}
	if code, out, errOut := run(t, "topology", "verify", "--config", cfg); code != 0 || !strings.Contains(out, "topology OK") {
		t.Errorf("verify after apply: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, "lint", "--config", cfg, "--live", "--strict"); code != 0 || strings.Contains(out, "dlt-outlives-catalog") {
		t.Errorf("lint --live after apply: %d %s %s", code, out, errOut)
	}

	// Longer than the catalog: a static warning naming both settings.
	long := writeConfig(t, fmt.Sprintf(base, `kafka_dlt_retention_hours = { "pay.refunded" = 720 }`))
	code, out, _ = run(t, "lint", "--config", long)
	if code != 0 || !strings.Contains(out, `kafka_dlt_retention_hours "pay.refunded" = 720, longer than dlq_retention_hours = 48`) {
		t.Errorf("static lint: %d %s", code, out)
	}
	// Forever, a tiny size cap, or a queue that is not kafka: refused, naming the entry, the value and the fix.
	for setting, want := range map[string]string{
		`kafka_dlt_retention_hours = { "pay.refunded" = -1 }`:   `kafka_dlt_retention_hours: "pay.refunded" = -1: must be in 1..87600 hours`,
		`kafka_dlt_retention_bytes = { "pay.refunded" = 1000 }`: `kafka_dlt_retention_bytes: "pay.refunded" = 1000: must be -1 (no size cap) or at least 1048576`,
		`kafka_dlt_retention_hours = { "pay.nowhere" = 24 }`:    `kafka_dlt_retention_hours: "pay.nowhere": no [[queue]] has this name`,
		`kafka_dlt_retention_bytes = { "pay.captured" = -1 }`:   "",
	} {
		code, _, errOut := run(t, "topology", "plan", "--config", writeConfig(t, fmt.Sprintf(base, setting)))
		if want == "" {
			if code != 0 {
				t.Errorf("%s: exit %d %s", setting, code, errOut)
			}
		} else if code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("%s: exit %d %s, want %q", setting, code, errOut, want)
		}
	}
}
