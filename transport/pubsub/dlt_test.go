package pubsub_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/pubsub"
	"github.com/lily-mq/lily/transport/transporttest"
)

func entries(t *testing.T, s *catalog.Store, queue string) []*catalog.Entry {
	t.Helper()
	var out []*catalog.Entry
	if err := s.Each(context.Background(), catalog.Filter{Queue: queue}, func(e *catalog.Entry) error {
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBrokerDeadLetterIngest lets the service's dead-letter policy
// forward a message (a consumer outside Lily nacks it max_delivery_attempts
// times), then ingests Lily's dead-letter subscription into the catalog:
// one entry with reason delivery_limit and the original body and
// attributes, however often pstest forwards it again (every ~10 ms, same
// message ID) and however often ingest runs. On both catalog stores.
func TestBrokerDeadLetterIngest(t *testing.T) {
	for name, open := range map[string]func(*testing.T) *catalog.Store{"sqlite": openCatalog, "postgres": openPostgresCatalog} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testBrokerDeadLetterIngest(t, open(t))
		})
	}
}

func testBrokerDeadLetterIngest(t *testing.T, cat *catalog.Store) {
	ctx := context.Background()
	srv := newServer(t)
	tr := open(t, srv, func(o *pubsub.Options) { o.MaxDeliveryAttempts = 5 })
	qc := lily.QueueConfig{Name: fmt.Sprintf("broker.dl.%08x", rand.Uint32()), Transport: lily.TransportPubSub, DeliveryLimit: new(3)}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	// A producer outside Lily: no event ID, its own attribute.
	srv.Publish("projects/"+project+"/topics/"+qc.Name, []byte("never processed"), map[string]string{"tenant": "acme"})
	id := ""
	for attempt := 1; attempt <= 5; attempt++ {
		var ds []*transport.Delivery
		for len(ds) == 0 {
			var err error
			ds, err = tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 1, Wait: time.Second, Consumer: "outsider"})
			if err != nil {
				t.Fatal(err)
			}
		}
		if ds[0].DeliveryCount != attempt {
			t.Fatalf("delivery %d has count %d", attempt, ds[0].DeliveryCount)
		}
		id = ds[0].MessageID
		if err := tr.Settle(ctx, &transport.SettleParams{Settlements: []transport.Settlement{{Delivery: ds[0], Action: transport.Release}}}); err != nil {
			t.Fatal(err)
		}
	}
	// waitForwarded waits until the dead-letter subscription holds the
	// message pstest forwarded (again).
	waitForwarded := func(what string) {
		t.Helper()
		transporttest.WaitForState(t, what, func() (bool, string) {
			dls, err := tr.DeadLetters(ctx, qc.Name)
			if err != nil {
				t.Fatal(err)
			}
			if len(dls) == 1 && (dls[0].MessageID != id || dls[0].EventID != id) {
				t.Fatalf("dead letter message %s event %s, want the source's message ID %s (pstest keeps it)", dls[0].MessageID, dls[0].EventID, id)
			}
			return len(dls) == 1, fmt.Sprintf("%d dead letters", len(dls))
		})
	}
	waitForwarded("the dead-letter policy to forward the message")
	for i := 0; i < 3; i++ {
		if i > 0 {
			waitForwarded("pstest to forward the message again") // the copy ingest must not store twice
		}
		if _, err := cat.Ingest(ctx, tr, qc.Name); err != nil {
			t.Fatal(err)
		}
	}
	es := entries(t, cat, qc.Name)
	if len(es) != 1 {
		t.Fatalf("%d catalog entries, want 1 (deduplicated by message ID)", len(es))
	}
	e := es[0]
	if e.Reason != string(evidence.ReasonDeliveryLimit) || string(e.Body) != "never processed" || e.EventID != id {
		t.Errorf("entry reason %q body %q event %s, want delivery_limit, the body, %s", e.Reason, e.Body, e.EventID, id)
	}
	if e.Headers["tenant"] != "acme" {
		t.Errorf("entry headers %v lost the producer's attribute", e.Headers)
	}
	if fs := evidence.DecodeForeign(e.Headers); len(fs) != 1 || fs[0].System != evidence.SystemPubSub {
		t.Errorf("foreign evidence %+v, want Pub/Sub's dead-letter policy", fs)
	}
}
