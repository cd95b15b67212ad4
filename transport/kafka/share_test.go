package kafka_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"
)

// shareLock is the acquisition lock of the share-group test clusters:
// short, so that the slow-handler behaviours outlive it and must renew.
const shareLock = time.Second

// newShareCluster starts kfake with share groups whose archive limit is
// the broker default (5) and whose lock is shareLock.
func newShareCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	return newCluster(t, append([]kfake.Opt{kfake.BrokerConfigs(map[string]string{
		kafka.BrokerShareLockDuration:       "1000",
		"group.share.heartbeat.interval.ms": "200",
	})}, opts...)...)
}

// shareOptions point a transport's share groups at the test lock.
func shareOptions(o *kafka.Options) { o.ShareLockDuration = shareLock }

// shareHarness runs the suite's queues through share groups (one per
// queue, named after it).
func shareHarness(c *kfake.Cluster) transporttest.Harness {
	h := harness(c)
	h.Name = "kafka"
	h.New = func(t *testing.T) transport.Transport { return open(t, c, shareOptions) }
	h.Lease = shareLock
	h.Configure = func(q *lily.QueueConfig) { q.KafkaShareGroup = "share." + q.Name }
	return h
}

// TestShareConformance runs the conformance suite with every queue
// consumed through a share group.
func TestShareConformance(t *testing.T) {
	transporttest.Run(t, shareHarness(newShareCluster(t)))
}

// TestShareLoad runs the real-traffic behaviours (competing members of one
// share group, slow handlers past the lock, a hanging dependency, a
// dead-lettered probe, a graceful hand-over) through share groups.
func TestShareLoad(t *testing.T) {
	transporttest.RunLoad(t, shareHarness(newShareCluster(t)))
}
