package nats_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/nats/natstest"
	"github.com/lily-mq/lily/transport/transporttest"
)

func openCatalog(t *testing.T) *catalog.Store {
	t.Helper()
	s, err := catalog.Open(context.Background(), filepath.Join(t.TempDir(), "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openPostgresCatalog(t *testing.T) *catalog.Store {
	t.Helper()
	s, err := catalog.OpenPostgres(context.Background(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// rawPublish publishes with a plain nats.go client (no Lily) to queue's
// subject and waits for each PubAck: the producer's ID, when it has one, as
// the x-lily-event-id header (a Nats-Msg-Id would make the stream drop a
// second message with the same ID), header values as NATS carries them
// (string, or []string for a header sent several times).
func rawPublish(ctx context.Context, t *testing.T, url, subject string, msgs []transporttest.ForeignMessage) {
	t.Helper()
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		h := natsgo.Header{}
		if m.ID != "" {
			h.Set(evidence.HeaderEventID, m.ID)
		}
		for k, v := range m.Headers {
			switch x := v.(type) {
			case string:
				h.Set(k, x)
			case []string:
				h[k] = x
			default:
				t.Fatalf("raw NATS header %s is %T: headers are text", k, v)
			}
		}
		if _, err := js.PublishMsg(ctx, &natsgo.Msg{Subject: subject, Header: h, Data: m.Body}); err != nil {
			t.Fatalf("raw publish to %s: %v", subject, err)
		}
	}
}

// sameHeader compares a header as sent (string or []string) with what Lily
// read back (string, or []any of strings).
func sameHeader(sent, got any) bool {
	switch s := sent.(type) {
	case []string:
		g, ok := got.([]any)
		if !ok || len(g) != len(s) {
			return false
		}
		return slices.Equal(s, func() []string {
			out := make([]string, len(g))
			for i, v := range g {
				out[i], _ = v.(string)
			}
			return out
		}())
	default:
		return fmt.Sprintf("%T %v", sent, sent) == fmt.Sprintf("%T %v", got, got)
	}
}

func foreignHarness(cat func(*testing.T) *catalog.Store) transporttest.ForeignHarness {
	return transporttest.ForeignHarness{
		Name: "nats",
		Open: func(t *testing.T) (transport.Transport, *catalog.Store) {
			c := cat(t)
			// ledger.Accounted does not pass ExtendLeases on, so AckWait
			// must outlast handler_timeout (30 s by default).
			return ledger.Account(open(t, func(o *nats.Options) { o.AckWait = time.Minute }), ledger.New(c)), c
		},
		PublishRaw: func(ctx context.Context, t *testing.T, tr transport.Transport, queue string, msgs []transporttest.ForeignMessage) {
			rawPublish(ctx, t, natstest.URL(t), base(tr).QueueBinding(queue).Subject, msgs)
		},
		Ingest: func(ctx context.Context, tr transport.Transport, cat *catalog.Store, queue string) error {
			_, err := cat.Ingest(ctx, tr.(*ledger.Accounted), queue)
			return err
		},
		// NATS headers are text, and a header may come several times.
		ForeignHeaders: map[string]any{
			"x-foreign-int":   "7",
			"x-foreign-empty": "",
			"x-foreign-text":  "héllo ünïcode",
			"x-foreign-many":  []string{"a", "b", "c"},
		},
		SameHeader:  sameHeader,
		HugeHeader:  48 << 10, // JetStream takes at most 64 KiB of headers, evidence included
		ForgedCount: map[string]any{"x-delivery-count": "99", evidence.HeaderPriorDeliveries: "99"},
		Teardown:    teardown,
	}
}

// TestForeignProducers runs the foreign-producer scenarios with a SQLite
// catalog.
func TestForeignProducers(t *testing.T) {
	t.Parallel()
	transporttest.RunForeign(t, foreignHarness(openCatalog))
}

// TestForeignProducersPostgresCatalog runs them with a PostgreSQL catalog.
func TestForeignProducersPostgresCatalog(t *testing.T) {
	t.Parallel()
	transporttest.RunForeign(t, foreignHarness(openPostgresCatalog))
}
