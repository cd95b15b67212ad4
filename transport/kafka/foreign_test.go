package kafka_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/transporttest"
)

// rawProducer publishes with a plain franz-go client (no Lily): the
// record's ID, when it has one, as the x-lily-event-id header (a log has
// no message ID of its own), headers as bytes (text as its UTF-8 bytes).
func rawProducer(c *kfake.Cluster) func(ctx context.Context, t *testing.T, _ transport.Transport, queue string, msgs []transporttest.ForeignMessage) {
	return func(ctx context.Context, t *testing.T, _ transport.Transport, queue string, msgs []transporttest.ForeignMessage) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RequiredAcks(kgo.AllISRAcks()))
		if err != nil {
			t.Fatalf("raw franz-go client: %v", err)
		}
		defer cl.Close()
		recs := make([]*kgo.Record, len(msgs))
		for i, m := range msgs {
			r := &kgo.Record{Topic: queue, Value: m.Body}
			if m.ID != "" {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: evidence.HeaderEventID, Value: []byte(m.ID)})
			}
			for k, v := range m.Headers {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: rawHeaderBytes(t, v)})
			}
			recs[i] = r
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("raw produce to %s: %v", queue, err)
		}
	}
}

func rawHeaderBytes(t *testing.T, v any) []byte {
	switch x := v.(type) {
	case []byte:
		return x
	case string:
		return []byte(x)
	}
	t.Fatalf("raw Kafka header value %T: give bytes or text", v)
	return nil
}

// TestForeignProducers runs the foreign-producer harness on kfake.
func TestForeignProducers(t *testing.T) {
	transporttest.RunForeign(t, foreignHarness(newCluster(t)))
}

// TestShareForeignProducers runs the foreign-producer harness with every
// queue consumed through a share group.
func TestShareForeignProducers(t *testing.T) {
	c := newShareCluster(t)
	h := foreignHarness(c)
	h.Open = func(t *testing.T) (transport.Transport, *catalog.Store) {
		cat := openCatalog(t)
		return ledger.Account(open(t, c, shareOptions), ledger.New(cat)), cat
	}
	h.Configure = func(q *lily.QueueConfig) { q.KafkaShareGroup = "share." + q.Name }
	transporttest.RunForeign(t, h)
}

// foreignHarness publishes below Lily with a raw franz-go client.
func foreignHarness(c *kfake.Cluster) transporttest.ForeignHarness {
	return transporttest.ForeignHarness{
		Name: "kafka",
		Open: func(t *testing.T) (transport.Transport, *catalog.Store) {
			cat := openCatalog(t)
			return ledger.Account(open(t, c), ledger.New(cat)), cat
		},
		PublishRaw: rawProducer(c),
		Ingest: func(ctx context.Context, tr transport.Transport, cat *catalog.Store, queue string) error {
			_, err := cat.Ingest(ctx, tr.(*ledger.Accounted), queue)
			return err
		},
		// Kafka header values are bytes: binary integers (as Spring Kafka
		// writes them), bytes that are not UTF-8, empty values.
		ForeignHeaders: map[string]any{
			"x-foreign-int32-be": []byte{0, 0, 0, 7},
			"x-foreign-not-utf8": []byte{0xff, 0xfe, 0x00, 0x01},
			"x-foreign-empty":    []byte{},
			"x-foreign-text":     []byte("héllo"),
		},
		SameHeader: func(sent, got any) bool {
			g, ok := got.([]byte)
			if !ok {
				s, isText := got.(string)
				g, ok = []byte(s), isText
			}
			return ok && bytes.Equal(sent.([]byte), g)
		},
		HugeHeader:  512 << 10, // well below the default 1 MiB record limit
		ForgedCount: map[string]any{"x-delivery-count": []byte("99"), "x-retry-count-copied": []byte("99")},
	}
}
