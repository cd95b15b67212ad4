package kafka_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"
)

// newCluster starts an in-process Kafka (kfake) for one test, closed at
// its end. Group session timeouts down to 100ms are allowed so that tests
// can use short ones.
func newCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(3), kfake.GroupMinSessionTimeout(100 * time.Millisecond)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// testOptions are transport options with timings fit for tests.
func testOptions(brokers []string) kafka.Options {
	return kafka.Options{
		Brokers: brokers, Partitions: 3,
		SessionTimeout: 3 * time.Second, RebalanceTimeout: 5 * time.Second, HeartbeatInterval: 100 * time.Millisecond,
		RevokeTimeout: 2 * time.Second, ProduceTimeout: 10 * time.Second, MetadataMaxAge: time.Second,
		Logger: quietLogger(),
	}
}

func quietLogger() *slog.Logger {
	if os.Getenv("LILY_KAFKA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// open connects a transport to the cluster, closed at the end of the test.
func open(t testing.TB, c *kfake.Cluster, mod ...func(*kafka.Options)) *kafka.Transport {
	t.Helper()
	o := testOptions(c.ListenAddrs())
	for _, f := range mod {
		f(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := kafka.Open(ctx, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func harness(c *kfake.Cluster) transporttest.Harness {
	return transporttest.Harness{
		Name: "kafka",
		New:  func(t *testing.T) transport.Transport { return open(t, c) },
		DeadLetters: func(ctx context.Context, tr transport.Transport, queue string) ([]transporttest.DeadLetter, error) {
			ds, err := tr.(*kafka.Transport).DeadLetters(ctx, queue)
			return transporttest.DeadLettersOf(queue, ds, err)
		},
		Abandon: func(ctx context.Context, tr transport.Transport, consumer string) error {
			_, err := tr.(*kafka.Transport).RecoverLeases(ctx, &transport.RecoverParams{Consumer: consumer})
			return err
		},
	}
}

// TestConformance runs the transport conformance suite on kfake.
func TestConformance(t *testing.T) {
	transporttest.Run(t, harness(newCluster(t)))
}

// TestLoad runs the real-traffic behaviours (competing consumers, slow
// handlers, a hanging dependency, a dead-lettered probe, a graceful
// hand-over) on kfake.
func TestLoad(t *testing.T) {
	transporttest.RunLoad(t, harness(newCluster(t)))
}

// TestOrdering runs the park scenario on kfake, with the catalog (and the
// held keys) in a SQLite file: a key's later records wait in the catalog
// behind its head while the partition's other keys flow. Block, which holds
// the whole partition on a log, is TestBlockHoldsThePartition.
func TestOrdering(t *testing.T) {
	c := newCluster(t)
	transporttest.RunOrdering(t, transporttest.OrderingHarness{
		Name: "kafka", LogTransport: true,
		Open: func(t *testing.T) (transport.Transport, *catalog.Store) {
			cat := openCatalog(t)
			return ledger.Account(open(t, c), ledger.New(cat)), cat
		},
	})
}
