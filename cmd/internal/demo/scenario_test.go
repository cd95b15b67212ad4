package demo_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/cmd/internal/demo/demotest"
	"github.com/lily-mq/lily/internal/rabbittest"
)

func TestDemoScenarioFlags(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "demo", "--scenario", "outage", "--rate", "40", "--outage", "1500ms", "--breaker=false", "--json",
		"--db", filepath.Join(t.TempDir(), "o.db"))
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, key := range []string{`"predicted_dead_lettered": 32`, `"dead_lettered":`, `"max_lag":`, `"acked":`, `"lost": 0`} {
		if !strings.Contains(out, key) {
			t.Errorf("outage JSON lacks %s:\n%s", key, out)
		}
	}
	for _, args := range [][]string{
		{"demo", "--scenario", "flood"},
		{"demo", "--scenario", "outage", "--rate", "0"},
		{"demo", "--scenario", "outage", "--outage", "-1s"},
	} {
		if code, _, errOut := run(t, args...); code != 2 {
			t.Errorf("%v: exit %d %q, want 2", args, code, errOut)
		}
	}
}

// TestOrderingScenario runs 'lily demo --scenario ordering' on each
// transport: the poisoned account's later postings wait, parked in order,
// while the other accounts are processed; unparked after the fix, every
// account's postings are processed in publish order, and nothing is lost.
func TestOrderingScenario(t *testing.T) {
	for _, kind := range []string{lily.TransportSQLite, lily.TransportRabbitMQ, lily.TransportKafka} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			args := []string{"demo", "--scenario", "ordering", "--transport", kind, "--json", "--db", filepath.Join(t.TempDir(), "o.db")}
			switch kind {
			case lily.TransportRabbitMQ:
				url := rabbittest.URL(t)
				queue := fmt.Sprintf("ordering%08x.postings", rand.Uint32())
				rabbittest.DeleteQueues(t, url, lily.QueueConfig{Name: queue, RetryAttempts: 2, RetryBackoffMillis: new(int64(50)), MaxRetryBackoffMillis: new(int64(100))}.WithDefaults().Spec())
				args = append(args, "--url", url, "--queue", queue)
			case lily.TransportKafka:
				// The cluster the demo's in-process Kafka would be
				// (cmd/lily-demo's), started by the test.
				args = append(args, "--brokers", demotest.Kafka(t, demo.ShareBrokerConfigs))
			}
			code, out, errOut := run(t, args...)
			if code != 0 {
				t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
			}
			var got demo.OrderingResult
			mustJSON(t, out, &got)
			want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
			if !got.InOrder || !slices.Equal(got.PoisonedKeyOrder, want) || got.Lost != 0 || got.Published != 80 ||
				got.OtherKeysDone != 7 || got.ParkedWhileHeld != 6 || got.UnparkAction != "redrive_head" {
				t.Errorf("ordering scenario = %+v", got)
			}
		})
	}
}
