package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lily-mq/lily/lint"
)

// newShareKafka starts kfake with the given broker configs (share-group
// limits) for one test and returns its brokers as --brokers takes them.
func newShareKafka(t *testing.T, brokerConfigs map[string]string) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond), kfake.BrokerConfigs(brokerConfigs))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return strings.Join(c.ListenAddrs(), ",")
}

// shareLintConfig writes a configuration with one kafka queue consumed by
// share group "orders-workers", with extra lines in the queue.
func shareLintConfig(t *testing.T, brokers, extra string) string {
	t.Helper()
	return writeConfig(t, fmt.Sprintf(`kafka_brokers = [%q]
[[queue]]
name = "orders.created"
transport = "kafka"
kafka_share_group = "orders-workers"
owner = "team-checkout"
retry_attempts = 3
%s
`, brokers, extra))
}

// TestLintShareDeliveryLimitStatic: a share-group queue whose
// delivery_limit is not below Kafka's default archive limit (5) is a
// static error naming the queue, the group, both values, why and the fix;
// the default delivery_limit of a share group (4) is clean.
func TestLintShareDeliveryLimitStatic(t *testing.T) {
	t.Parallel()
	cfg := shareLintConfig(t, "127.0.0.1:1", "delivery_limit = 5")
	code, r, _ := lintJSON(t, "--config", cfg)
	f := lintFinding(t, r, lint.CodeShareDeliveryLimit, "orders.created")
	if code != 1 || f.Severity != lint.Error {
		t.Errorf("exit %d, severity %s; want 1, error", code, f.Severity)
	}
	for _, want := range []string{`delivery_limit = 5`, `kafka_share_group = "orders-workers"`, "default share-group delivery limit 5",
		"group.share.delivery.count.limit"} {
		if !strings.Contains(f.What, want) {
			t.Errorf("what %q lacks %q", f.What, want)
		}
	}
	if !strings.Contains(f.Why, "archives") || !strings.Contains(f.Why, "no copy") {
		t.Errorf("why %q does not say the broker archives the record without a copy", f.Why)
	}
	if !strings.Contains(f.Fix, "delivery_limit to at most 4") || !strings.Contains(f.Fix, "lily lint --live") {
		t.Errorf("fix %q", f.Fix)
	}
	// The text output names it too.
	if code, out, _ := run(t, "lint", "--config", cfg); code != 1 || !strings.Contains(out, "error   share-delivery-limit: delivery_limit = 5") {
		t.Errorf("text: exit %d\n%s", code, out)
	}
	// The share group's default delivery_limit (4) is below the default limit.
	if code, r, _ := lintJSON(t, "--config", shareLintConfig(t, "127.0.0.1:1", "")); code != 0 || r.Has(lint.CodeShareDeliveryLimit, "orders.created") {
		t.Errorf("default delivery_limit: exit %d %+v", code, r.Findings)
	}
}

// TestLintShareLive reads the share group's delivery limit and lock from
// kfake: a broker limit of 4 makes the default delivery_limit 4 an error
// (source broker); a broker limit of 8 lets delivery_limit 5 pass — the
// static finding, judged against Kafka's default, gives way; a lock
// shorter than 30 s is a warning; the group's own setting wins over the
// brokers' (source group).
func TestLintShareLive(t *testing.T) {
	t.Parallel()
	t.Run("broker limit 4", func(t *testing.T) {
		t.Parallel()
		brokers := newShareKafka(t, map[string]string{"group.share.delivery.count.limit": "4"})
		cfg := shareLintConfig(t, brokers, "")
		if code, r, _ := lintJSON(t, "--config", cfg); code != 0 || len(r.Findings) != 0 {
			t.Fatalf("static: exit %d %+v, want clean (delivery_limit 4 < 5)", code, r.Findings)
		}
		code, r, errOut := lintJSON(t, "--config", cfg, "--live")
		f := lintFinding(t, r, lint.CodeShareDeliveryLimit, "orders.created")
		if code != 1 || f.Severity != lint.Error {
			t.Errorf("exit %d severity %s, want 1 error (stderr %s)", code, f.Severity, errOut)
		}
		if want := "delivery_limit = 4 is not below share group orders-workers's delivery limit 4 (source broker: the brokers' group.share.delivery.count.limit)"; f.What != want {
			t.Errorf("what %q, want %q", f.What, want)
		}
		if !strings.Contains(f.Fix, "delivery_limit to at most 3") || !strings.Contains(f.Fix, "group.share.delivery.count.limit on the brokers above 4") {
			t.Errorf("fix %q", f.Fix)
		}
		if r.Has(lint.CodeShareLockShort, "orders.created") {
			t.Errorf("lock warning with the default 30 s lock: %+v", r.Findings)
		}
	})
	t.Run("broker limit 8", func(t *testing.T) {
		t.Parallel()
		brokers := newShareKafka(t, map[string]string{"group.share.delivery.count.limit": "8"})
		cfg := shareLintConfig(t, brokers, "delivery_limit = 5")
		if code, r, _ := lintJSON(t, "--config", cfg); code != 1 || !r.Has(lint.CodeShareDeliveryLimit, "orders.created") {
			t.Fatalf("static: exit %d %+v, want the static error (5 is Kafka's default limit)", code, r.Findings)
		}
		code, r, errOut := lintJSON(t, "--config", cfg, "--live", "--strict")
		if code != 0 || r.Has(lint.CodeShareDeliveryLimit, "orders.created") || r.Has(lint.CodeShareLockShort, "orders.created") {
			t.Errorf("live with limit 8: exit %d %+v (stderr %s), want clean", code, r.Findings, errOut)
		}
	})
	t.Run("default limit, short lock", func(t *testing.T) {
		t.Parallel()
		brokers := newShareKafka(t, map[string]string{"group.share.record.lock.duration.ms": "5000"})
		cfg := shareLintConfig(t, brokers, "delivery_limit = 5")
		code, r, _ := lintJSON(t, "--config", cfg, "--live")
		f := lintFinding(t, r, lint.CodeShareDeliveryLimit, "orders.created")
		if code != 1 || !strings.Contains(f.What, "delivery limit 5 (source ") {
			t.Errorf("exit %d what %q", code, f.What)
		}
		l := lintFinding(t, r, lint.CodeShareLockShort, "orders.created")
		if want := "share group orders-workers's acquisition lock is 5s (source broker: the brokers' group.share.record.lock.duration.ms), shorter than the 30s Lily assumes"; l.Severity != lint.Warning || l.What != want {
			t.Errorf("lock finding %s %q, want warning %q", l.Severity, l.What, want)
		}
		if !strings.Contains(l.Fix, "at least 30000 ms") {
			t.Errorf("lock fix %q", l.Fix)
		}
		// One share-delivery-limit finding: the live one replaced the static one.
		n := 0
		for _, f := range r.Findings {
			if f.Code == lint.CodeShareDeliveryLimit {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d share-delivery-limit findings, want 1: %+v", n, r.Findings)
		}
	})
	t.Run("group limit", func(t *testing.T) {
		t.Parallel()
		brokers := newShareKafka(t, map[string]string{"group.share.delivery.count.limit": "8"})
		cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		// kfake accepts the group's limit (and ignores it when delivering);
		// a real broker applies it, so lint judges by it.
		req := kmsg.NewPtrIncrementalAlterConfigsRequest()
		res := kmsg.NewIncrementalAlterConfigsRequestResource()
		res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeGroupConfig, "orders-workers"
		c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
		c.Name, c.Op, c.Value = "share.delivery.count.limit", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("3")
		res.Configs = append(res.Configs, c)
		req.Resources = append(req.Resources, res)
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		if e := kerr.ErrorForCode(resp.Resources[0].ErrorCode); e != nil {
			t.Fatal(e)
		}
		code, r, _ := lintJSON(t, "--config", shareLintConfig(t, brokers, ""), "--live")
		f := lintFinding(t, r, lint.CodeShareDeliveryLimit, "orders.created")
		if want := "delivery_limit = 4 is not below share group orders-workers's delivery limit 3 (source group: share group orders-workers's share.delivery.count.limit)"; code != 1 || f.What != want {
			t.Errorf("exit %d what %q, want %q", code, f.What, want)
		}
		if !strings.Contains(f.Fix, "share.delivery.count.limit on the share group") {
			t.Errorf("fix %q", f.Fix)
		}
	})
}
