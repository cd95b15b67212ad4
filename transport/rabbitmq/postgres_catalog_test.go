package rabbitmq_test

import (
	"context"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/transporttest"
)

// openAccountedPostgres is openAccounted with the catalog (ledger, held
// keys, dead letters) on PostgreSQL, as a fleet runs it.
func openAccountedPostgres(t *testing.T) (transport.Transport, *catalog.Store) {
	t.Helper()
	tr := open(t)
	t.Cleanup(func() { tr.Close() })
	cat, err := catalog.OpenPostgres(context.Background(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return ledger.Account(tr, ledger.New(cat)), cat
}

// TestOrderingPostgresCatalog runs the park and block scenarios on the
// broker with the held keys in a PostgreSQL catalog.
func TestOrderingPostgresCatalog(t *testing.T) {
	transporttest.RunOrdering(t, transporttest.OrderingHarness{
		Name: "rabbitmq",
		Open: openAccountedPostgres,
		Teardown: func(ctx context.Context, tr transport.Transport, spec transport.QueueSpec) error {
			return tr.(*ledger.Accounted).Unwrap().(*rabbitmq.Transport).DeleteQueues(ctx, spec)
		},
	})
}

// TestForeignProducersPostgresCatalog runs the foreign-producer harness
// with the ledger in a PostgreSQL catalog.
func TestForeignProducersPostgresCatalog(t *testing.T) {
	h := foreignHarness()
	h.Open = openAccountedPostgres
	transporttest.RunForeign(t, h)
}
