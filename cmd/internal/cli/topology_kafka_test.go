package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestTopologyKafka plans, applies and verifies the topics of a kafka
// queue on kfake: every topic with kafka_partitions partitions and the
// planned configs; a retry topic created beforehand with another
// partition count and a dead-letter topic whose retention was changed are
// reported, each with its fix; apply sets the retention back.
func TestTopologyKafka(t *testing.T) {
	t.Parallel()
	cluster, brokers := newKafka(t)
	cfg := writeConfig(t, fmt.Sprintf(`
kafka_brokers = [%q]
kafka_partitions = 4
[[queue]]
name = "shop.orders"
transport = "kafka"
retry_attempts = 2
`, brokers))
	code, out, errOut := run(t, "topology", "plan", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("plan: exit %d %s", code, errOut)
	}
	var plan topologyJSON
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := map[string]string{}
	for _, tp := range plan.KafkaTopics {
		var cfgs []string
		for k, v := range tp.Configs {
			cfgs = append(cfgs, k+"="+*v)
		}
		got[tp.Name] = fmt.Sprintf("%s/%d/%s", tp.Role, tp.Partitions, strings.Join(sortedStrings(cfgs), ","))
	}
	want := map[string]string{
		"shop.orders":              "main/4/",
		"shop.orders.retry.1000ms": "retry/4/",
		"shop.orders.retry.2000ms": "retry/4/",
		"shop.orders.retry.0ms":    "retry/4/",
		"shop.orders.dlt":          "dlt/4/retention.bytes=-1,retention.ms=1209600000,segment.ms=3600000", // dlq_retention_hours' 336h
		"shop.orders.attempts":     "attempts/4/cleanup.policy=compact,segment.ms=3600000",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("planned topics %v, want %v", got, want)
	}
	if code, out, _ := run(t, "topology", "plan", "--config", cfg); code != 0 || !strings.Contains(out, "shop.orders.retry.2000ms") ||
		!strings.Contains(out, "cleanup.policy=compact") || strings.Contains(out, "EXCHANGE") {
		t.Errorf("human plan: exit %d\n%s", code, out)
	}

	code, out, _ = run(t, "topology", "verify", "--config", cfg, "--json")
	var v verifyJSON
	mustJSON(t, out, &v)
	if code != 1 || v.OK || len(v.KafkaDifferences) != 6 || v.KafkaDifferences[0].Kind != "missing" {
		t.Fatalf("verify before apply: exit %d %+v", code, v)
	}
	// Someone created a retry topic by hand, with one partition.
	if err := cluster.CreateTopic("shop.orders.retry.2000ms", 1, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // idempotent
		if code, out, errOut := run(t, "topology", "apply", "--config", cfg); code != 0 || !strings.Contains(out, "declared 6 Kafka topics") {
			t.Fatalf("apply %d: exit %d %s %s", i+1, code, out, errOut)
		}
	}
	k := openTestKafka(t, brokers)
	if n, err := k.Partitions(context.Background(), "shop.orders.dlt"); err != nil || n != 4 {
		t.Errorf("dead-letter topic: %d partitions (%v), want 4", n, err)
	}
	if _, err := kadm.NewClient(k.Client()).AlterTopicConfigs(context.Background(),
		[]kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("604800000")}}, "shop.orders.dlt"); err != nil {
		t.Fatal(err)
	}
	code, out, _ = run(t, "topology", "verify", "--config", cfg)
	for _, w := range []string{"topic shop.orders.retry.2000ms (retry of shop.orders): 1 partitions, want 4",
		"topic shop.orders.dlt (dlt of shop.orders): retention.ms = 604800000, want 1209600000; 'lily topology apply' sets it"} {
		if code != 1 || !strings.Contains(out, w) {
			t.Errorf("verify: exit %d, output lacks %q:\n%s", code, w, out)
		}
	}
	if strings.Count(out, "\n") != 2 {
		t.Errorf("verify reported more than the two differences:\n%s", out)
	}
	// Fixed: apply sets the dead-letter topic's retention again; verify passes.
	if _, err := kadm.NewClient(k.Client()).DeleteTopics(context.Background(), "shop.orders.retry.2000ms"); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := run(t, "topology", "apply", "--config", cfg); code != 0 {
		t.Fatalf("apply: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, "topology", "verify", "--config", cfg); code != 0 || !strings.Contains(out, "topology OK: 6 Kafka topics as planned") {
		t.Errorf("verify after the fix: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, _, errOut := run(t, "topology", "verify", "--config", cfg, "--brokers", "nohost"); code != 2 || !strings.Contains(errOut, "--brokers") {
		t.Errorf("bad --brokers: exit %d %s", code, errOut)
	}
}

func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
