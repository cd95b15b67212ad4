package kafka_test

import (
	"context"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestOrderingPostgresCatalog runs the park scenario on kfake with the
// held keys in a PostgreSQL catalog, as a fleet of consumers shares it.
func TestOrderingPostgresCatalog(t *testing.T) {
	c := newCluster(t)
	transporttest.RunOrdering(t, transporttest.OrderingHarness{
		Name: "kafka", LogTransport: true,
		Open: func(t *testing.T) (transport.Transport, *catalog.Store) {
			cat, err := catalog.OpenPostgres(context.Background(), pgtest.URL(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cat.Close() })
			return ledger.Account(open(t, c), ledger.New(cat)), cat
		},
	})
}
