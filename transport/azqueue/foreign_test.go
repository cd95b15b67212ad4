package azqueue_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/azqueue"
	"github.com/lily-mq/lily/transport/transporttest"
)

// base returns the azqueue transport under a ledger.Accounted.
func base(tr transport.Transport) *azqueue.Transport {
	return tr.(*ledger.Accounted).Transport.(*azqueue.Transport)
}

// rawEnqueue enqueues msgs with the SDK's own client, as another service
// would. A Storage queue message is one string: a message without headers
// goes as its body's text; one with headers is written by hand in Lily's
// envelope as docs/azqueue.md documents it (another tool writing to a
// Lily queue), with a forged dequeue_base far above any count the
// service has given it. A producer ID has nowhere to go (the service
// assigns the message ID) and is not sent.
func rawEnqueue(ctx context.Context, t *testing.T, tr *azqueue.Transport, queue string, msgs []transporttest.ForeignMessage) {
	t.Helper()
	c := tr.Service().NewQueueClient(azqueue.QueueName(queue))
	for _, m := range msgs {
		text := string(m.Body)
		if len(m.Headers) > 0 {
			h, err := transport.MarshalHeaders(transport.Headers(m.Headers))
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(map[string]any{"lily_envelope": azqueue.EnvelopeVersion, "headers": json.RawMessage(h),
				"body": string(m.Body), "dequeue_base": 1000})
			if err != nil {
				t.Fatal(err)
			}
			text = string(b)
		}
		if _, err := c.EnqueueMessage(ctx, text, nil); err != nil {
			t.Fatalf("raw enqueue to %s: %v", queue, err)
		}
	}
}

// TestForeignProducers runs the foreign-producer scenarios with a SQLite
// catalog.
func TestForeignProducers(t *testing.T) {
	transporttest.RunForeign(t, transporttest.ForeignHarness{
		Name: "azqueue",
		Open: func(t *testing.T) (transport.Transport, *catalog.Store) {
			c := transporttest.TempCatalog(t)
			// ledger.Accounted does not pass ExtendLeases on, so the lease
			// must outlast handler_timeout (30 s by default).
			return ledger.Account(open(t, func(o *azqueue.Options) { o.VisibilityTimeout = 60e9 }), ledger.New(c)), c
		},
		PublishRaw: func(ctx context.Context, t *testing.T, tr transport.Transport, queue string, msgs []transporttest.ForeignMessage) {
			rawEnqueue(ctx, t, base(tr), queue, msgs)
		},
		Ingest: func(ctx context.Context, tr transport.Transport, cat *catalog.Store, queue string) error {
			_, err := cat.Ingest(ctx, tr.(*ledger.Accounted), queue)
			return err
		},
		// Header types a hand-written envelope carries (typed JSON).
		ForeignHeaders: map[string]any{
			"x-foreign-int":   int64(7),
			"x-foreign-bool":  true,
			"x-foreign-bytes": []byte{0, 1, 0xff},
			"x-foreign-text":  "héllo ünïcode",
		},
		// 64 KiB a message, the envelope and Lily's evidence included.
		HugeHeader:  40 << 10,
		ForgedCount: map[string]any{"x-delivery-count": int32(99), "x-lily-prior-deliveries": int32(99)},
		Teardown: func(ctx context.Context, tr transport.Transport, spec transport.QueueSpec) error {
			return base(tr).DeleteQueues(ctx, spec.Name)
		},
	})
}
