package pubsub_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/pubsub"
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

// rawPublisher publishes with the plain Pub/Sub API client (no Lily): the
// producer's ID, when it has one, as the x-lily-event-id attribute (Pub/Sub
// message IDs are the service's, not the producer's); attributes as text.
func rawPublisher(srv *pstest.Server) func(ctx context.Context, t *testing.T, _ transport.Transport, queue string, msgs []transporttest.ForeignMessage) {
	return func(ctx context.Context, t *testing.T, _ transport.Transport, queue string, msgs []transporttest.ForeignMessage) {
		t.Helper()
		conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		pub, err := vkit.NewTopicAdminClient(ctx, option.WithGRPCConn(conn))
		if err != nil {
			t.Fatal(err)
		}
		pms := make([]*pubsubpb.PubsubMessage, len(msgs))
		for i, m := range msgs {
			attrs := map[string]string{}
			if m.ID != "" {
				attrs[evidence.HeaderEventID] = m.ID
			}
			for k, v := range m.Headers {
				s, ok := v.(string)
				if !ok {
					t.Fatalf("raw Pub/Sub attribute %s is %T: attributes are text", k, v)
				}
				attrs[k] = s
			}
			pms[i] = &pubsubpb.PubsubMessage{Data: m.Body, Attributes: attrs}
		}
		if _, err := pub.Publish(ctx, &pubsubpb.PublishRequest{Topic: "projects/" + project + "/topics/" + queue, Messages: pms}); err != nil {
			t.Fatalf("raw publish to %s: %v", queue, err)
		}
	}
}

func foreignHarness(srv *pstest.Server, cat func(*testing.T) *catalog.Store) transporttest.ForeignHarness {
	return transporttest.ForeignHarness{
		Name: "pubsub",
		Open: func(t *testing.T) (transport.Transport, *catalog.Store) {
			c := cat(t)
			// ledger.Accounted does not pass ExtendLeases on, so the ack
			// deadline must outlast handler_timeout (30 s by default).
			return ledger.Account(open(t, srv, withCount(srv), func(o *pubsub.Options) { o.AckDeadline = time.Minute }), ledger.New(c)), c
		},
		PublishRaw: rawPublisher(srv),
		Ingest: func(ctx context.Context, tr transport.Transport, cat *catalog.Store, queue string) error {
			_, err := cat.Ingest(ctx, tr.(*ledger.Accounted), queue)
			return err
		},
		// Pub/Sub attributes are text: what a foreign producer sends are
		// strings, up to the service's 1024 bytes, UTF-8 anywhere.
		ForeignHeaders: map[string]any{
			"x-foreign-int":     "7",
			"x-foreign-empty":   "",
			"x-foreign-text":    "héllo ünïcode",
			"googclient_schema": "x", // not goog-prefixed: plain
		},
		HugeHeader:  pubsub.MaxAttributeValue,
		ForgedCount: map[string]any{"x-delivery-count": "99", "googclient_deliveryattempt": "99"},
		Teardown: func(ctx context.Context, tr transport.Transport, spec transport.QueueSpec) error {
			return tr.(*ledger.Accounted).Transport.(*pubsub.Transport).DeleteQueue(ctx, spec)
		},
	}
}

// TestForeignProducers runs the foreign-producer harness on pstest with a
// SQLite catalog.
func TestForeignProducers(t *testing.T) {
	transporttest.RunForeign(t, foreignHarness(newServer(t), openCatalog))
}

// TestForeignProducersPostgresCatalog runs it with a PostgreSQL catalog.
func TestForeignProducersPostgresCatalog(t *testing.T) {
	transporttest.RunForeign(t, foreignHarness(newServer(t), openPostgresCatalog))
}
