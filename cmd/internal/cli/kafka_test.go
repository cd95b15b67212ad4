package cli

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// newKafka starts an in-process Kafka (kfake) for one test and returns
// it with its brokers as --brokers takes them.
func newKafka(t *testing.T) (*kfake.Cluster, string) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c, strings.Join(c.ListenAddrs(), ",")
}

// kafkaConfig writes a configuration with one kafka queue on brokers.
func kafkaConfig(t *testing.T, db, brokers, queue, extra string) string {
	t.Helper()
	var bs []string
	for _, b := range strings.Split(brokers, ",") {
		bs = append(bs, fmt.Sprintf("%q", b))
	}
	return writeConfig(t, fmt.Sprintf("db = %q\nkafka_brokers = [%s]\n%s\n[[queue]]\nname = %q\ntransport = \"kafka\"\nretry_attempts = 3\nretry_backoff_millis = 20\nmax_retry_backoff_millis = 80\nretry_jitter_ratio = 0.2\n",
		db, strings.Join(bs, ", "), extra, queue))
}

// TestKafkaBadBrokers: a --brokers value that is not host:port,... exits 2
// naming the flag, before anything is sent. (The demo's own cases are
// package demo's TestDemoBadBrokers.)
func TestKafkaBadBrokers(t *testing.T) {
	t.Parallel()
	cfg := kafkaConfig(t, filepath.Join(t.TempDir(), "c.db"), "127.0.0.1:9092", "orders", "")
	for _, args := range [][]string{
		{"dlq", "ingest", "--config", cfg, "--brokers", "kafka-1:x"},
		{"topology", "apply", "--config", cfg, "--brokers", ":9092"},
	} {
		if code, _, errOut := run(t, args...); code != 2 || !strings.Contains(errOut, "--brokers") {
			t.Errorf("%v: exit %d %q, want 2 naming --brokers", args, code, errOut)
		}
	}
}
