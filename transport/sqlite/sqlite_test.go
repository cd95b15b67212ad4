package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// harness runs the conformance suite on a fresh database file per subtest.
func harness() transporttest.Harness { return leaseHarness(5 * time.Second) }

// leaseHarness is harness with the given visibility timeout.
func leaseHarness(lease time.Duration) transporttest.Harness {
	return transporttest.Harness{
		Name:  "sqlite",
		Lease: lease,
		New: func(t *testing.T) transport.Transport {
			tr, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "lily.db"), sqlite.Options{
				VisibilityTimeout: lease, PollInterval: 5 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		DeadLetters: deadLetters,
		Abandon: func(ctx context.Context, tr transport.Transport, consumer string) error {
			_, err := tr.(*sqlite.Transport).RecoverLeases(ctx, &transport.RecoverParams{Consumer: consumer})
			return err
		},
	}
}

func deadLetters(ctx context.Context, tr transport.Transport, queue string) ([]transporttest.DeadLetter, error) {
	cat, err := catalog.New(ctx, tr.(*sqlite.Transport).DB())
	if err != nil {
		return nil, err
	}
	var out []transporttest.DeadLetter
	err = cat.Each(ctx, catalog.Filter{Queue: queue}, func(e *catalog.Entry) error {
		out = append(out, transporttest.DeadLetter{Queue: e.Queue, EventID: e.EventID, Key: e.Key, Type: e.Type,
			Body: e.Body, Headers: e.Headers, Reason: e.Reason})
		return nil
	})
	return out, err
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, harness())
}

// TestLoad runs the real-traffic behaviours (competing consumers, slow
// handlers, a hanging dependency, a dead-lettered probe, a graceful
// hand-over) with a short lease: 2s, shorter than the slow handlers (and
// long enough for its extensions on a loaded machine).
func TestLoad(t *testing.T) {
	transporttest.RunLoad(t, leaseHarness(2*time.Second))
}

// TestOrdering runs the park and block scenarios on the embedded store,
// whose catalog is in the same database file.
func TestOrdering(t *testing.T) {
	transporttest.RunOrdering(t, transporttest.OrderingHarness{
		Name: "sqlite",
		Open: openWithCatalog,
	})
}

// openWithCatalog opens the test transport and the catalog in its own
// database file: the Open of the shared harnesses.
func openWithCatalog(t *testing.T) (transport.Transport, *catalog.Store) {
	tr := harness().New(t)
	t.Cleanup(func() { tr.Close() })
	cat, err := catalog.New(context.Background(), tr.(*sqlite.Transport).DB())
	if err != nil {
		t.Fatal(err)
	}
	return tr, cat
}
