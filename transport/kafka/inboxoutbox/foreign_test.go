package inboxoutbox_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/effecttest"
)

// TestKill9ForeignProducers is the inbox's kill -9 test between commit and
// ack (inbox.TestKill9BetweenCommitAndAck) for traffic Lily did not
// publish: payments sent by a raw franz-go producer with no
// x-lily-event-id (binary headers) to kfake. (The same for a raw amqp091
// client to RabbitMQ is in package inbox.) The consumer, counting into a
// catalog's ledger, commits each effect through the inbox keyed by the
// transport's synthetic event ID (topic/partition/offset) and is killed
// with SIGKILL after the commit of every third payment, before the ack,
// and restarted. Every payment's effect is applied exactly once (rows and
// amounts in the application database), every redelivery after a kill
// carries the same synthetic ID as the delivery that applied it and is
// found applied, and the ledger balances: accepted = acked, nothing lost.
func TestKill9ForeignProducers(t *testing.T) {
	bodies, wantAmount := effecttest.ForeignPayments(45)
	t.Run("kafka", func(t *testing.T) {
		t.Parallel()
		c := newKfake(t)
		qc := effecttest.QueueConfig(lily.TransportKafka, effecttest.RandomQueue("inbox.crash.foreign"))
		tr := openKafka(t, c, qc)
		recs := make([]*kgo.Record, len(bodies))
		for i, b := range bodies {
			recs[i] = foreignRecord(qc.Name, fmt.Sprintf("acct-%d", i%5), string(b), uint32(100+i))
		}
		rawKafka(t, c, recs)
		effecttest.RunForeignKills(t, qc, tr, strings.Join(c.ListenAddrs(), ","), bodies, wantAmount, func(id string) bool { return strings.HasPrefix(id, qc.Name+"/") })
	})
}
