package pubsub_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/pubsub"
	"github.com/lily-mq/lily/transport/transporttest"
)

// operatorHarness runs the operator paths on pstest srv with the catalog
// cat opens. A topic fans out to every subscription, so the "failing
// consumer alone" scenario runs beside another subscription of the
// queue's topic. A dead-letter topic has no max-length and a copy that
// does not fit drops Lily's evidence first (docs/design.md §8.7): no full
// DLQ, no refused size.
func operatorHarness(srv *pstest.Server, cat func(*testing.T) *catalog.Store) transporttest.OperatorHarness {
	return transporttest.OperatorHarness{
		Name: "pubsub",
		Open: func(t *testing.T) (transport.Transport, *catalog.Store) {
			c := cat(t)
			// ledger.Accounted does not pass ExtendLeases on, so the ack
			// deadline must outlast handler_timeout (30 s by default).
			return ledger.Account(open(t, srv, withCount(srv), func(o *pubsub.Options) { o.AckDeadline = time.Minute }), ledger.New(c)), c
		},
		Teardown: func(ctx context.Context, tr transport.Transport, spec transport.QueueSpec) error {
			return tr.(*ledger.Accounted).Unwrap().(*pubsub.Transport).DeleteQueue(ctx, spec)
		},
		FanOut: func(_ context.Context, t *testing.T, _ transport.Transport, queue string) func() map[string]int {
			other := subscribeOther(t, srv, queue, fmt.Sprintf("analytics.%08x", rand.Uint32()))
			// pstest delivers what was published at once: a pull that
			// brings nothing has read all there is.
			return func() map[string]int { return other.drain(t) }
		},
	}
}

// TestOperatorPaths runs the operator paths (redrive, to the failing
// subscription alone, redirect, sample, rate, cancel, a runner that dies
// mid-job) on pstest with the catalog in a SQLite file.
func TestOperatorPaths(t *testing.T) {
	t.Parallel()
	transporttest.OperatorPaths(t, operatorHarness(newServer(t), openCatalog))
}

// TestOperatorPathsPostgresCatalog runs them with the catalog on
// PostgreSQL.
func TestOperatorPathsPostgresCatalog(t *testing.T) {
	t.Parallel()
	transporttest.OperatorPaths(t, operatorHarness(newServer(t), openPostgresCatalog))
}
