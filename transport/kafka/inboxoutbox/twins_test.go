package inboxoutbox_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/inbox"
	"github.com/lily-mq/lily/internal/effecttest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestForeignTwins: two different messages from a foreign producer that
// are byte-identical (same body, same headers, no ID), and a third one,
// as raw franz-go records: each has its own offset, so the twins get
// different event IDs and both effects apply: 3 effects, no twin
// reported, the ledger balanced with 3 accepted and acked. (SQLite and
// RabbitMQ, where the twins share one content ID: package inbox.)
func TestForeignTwins(t *testing.T) {
	t.Run("kafka", func(t *testing.T) {
		t.Parallel()
		c := newKfake(t)
		qc := lily.QueueConfig{Name: effecttest.RandomQueue("twins.kafka"), Transport: lily.TransportKafka}.WithDefaults()
		tr := openKafka(t, c, qc)
		rawKafka(t, c, []*kgo.Record{foreignRecord(qc.Name, "acct-7", effecttest.TwinBody, 1000), foreignRecord(qc.Name, "acct-7", effecttest.TwinBody, 1000),
			foreignRecord(qc.Name, "acct-8", effecttest.OtherBody, 2500)})
		cat := transporttest.TempCatalog(t)
		effecttest.CheckTwins(t, effecttest.ConsumeTwins(t, ledger.Account(tr, ledger.New(cat)), tr, qc, inbox.ContentIDsOnce, 3), cat, tr, qc, false)
	})
}
