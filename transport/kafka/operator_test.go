package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"
)

// operatorHarness runs the operator paths on kfake c with the catalog
// cat opens. Kafka fans a topic out to every consumer group, so the
// "failing consumer alone" scenario runs beside another group; its
// dead-letter topic refuses a record over max.message.bytes, so the
// "oversized" one runs too. A topic has no max-length: no full DLQ.
func operatorHarness(c *kfake.Cluster, cat func(*testing.T) *catalog.Store) transporttest.OperatorHarness {
	return transporttest.OperatorHarness{
		Name: "kafka",
		Open: func(t *testing.T) (transport.Transport, *catalog.Store) {
			s := cat(t)
			return ledger.Account(open(t, c), ledger.New(s)), s
		},
		FanOut: func(ctx context.Context, t *testing.T, tr transport.Transport, queue string) func() map[string]int {
			kt := tr.(*ledger.Accounted).Unwrap().(*kafka.Transport)
			other := readOtherGroup(t, c, fmt.Sprintf("analytics.%08x", rand.Uint32()), queue)
			return func() map[string]int {
				// Everything the topic holds, read: a redrive through it
				// would be among it.
				n := records(t, kt, queue)
				transporttest.WaitFor(t, fmt.Sprintf("the other group to read the %d records of %s", n, queue), func() bool { return int64(other.count()) >= n })
				other.mu.Lock()
				defer other.mu.Unlock()
				return maps.Clone(other.seen[queue])
			}
		},
		Oversized: func(ctx context.Context, t *testing.T, tr transport.Transport, queue string) string {
			kt := tr.(*ledger.Accounted).Unwrap().(*kafka.Transport)
			dlt := kafka.DeadLetterTopic(queue)
			res, err := kadm.NewClient(kt.Client()).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr("4000")}}, dlt)
			if err == nil {
				for _, r := range res {
					err = errors.Join(err, r.Err)
				}
			}
			if err != nil {
				t.Fatalf("set max.message.bytes on %s: %v", dlt, err)
			}
			big := make([]byte, 3950) // incompressible: the producer compresses batches
			for i := range big {
				big[i] = byte('a' + rand.IntN(26))
			}
			id := fmt.Sprintf("big-%08x", rand.Uint32())
			if err := lily.Publish(ctx, tr, queue, []lily.Message{{EventID: id, Key: "big", Body: big}}); err != nil {
				t.Fatal(err)
			}
			return id
		},
	}
}

// TestOperatorPaths runs the operator paths (redrive, to the failing
// group alone, redirect, sample, rate, cancel, a runner that dies
// mid-job, an oversized dead letter) on kfake with the catalog in a
// SQLite file.
func TestOperatorPaths(t *testing.T) {
	t.Parallel()
	transporttest.OperatorPaths(t, operatorHarness(newCluster(t), openCatalog))
}

// TestOperatorPathsPostgresCatalog runs them with the catalog on
// PostgreSQL.
func TestOperatorPathsPostgresCatalog(t *testing.T) {
	t.Parallel()
	transporttest.OperatorPaths(t, operatorHarness(newCluster(t), func(t *testing.T) *catalog.Store {
		s, err := catalog.OpenPostgres(context.Background(), pgtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}))
}
