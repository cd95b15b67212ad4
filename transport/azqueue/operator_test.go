package azqueue_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/azqueue"
	"github.com/lily-mq/lily/transport/azqueue/azuritetest"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestOperatorPaths runs the shared operator paths — redrive, redirect,
// a sample proved clean and one that fails, a rate, a cancelled job, a
// runner that dies mid-job, one message's whole path as one trace — on
// Azurite, with the catalog in a SQLite file and the ledger accounting
// the transport. An Azure queue has one set of readers (no fan-out) and no
// max-length (never full), but refuses a message over 64 KiB: the
// "oversized" scenario runs, with a body that fits alone and not with the
// evidence of a dead-lettering.
func TestOperatorPaths(t *testing.T) {
	t.Parallel()
	o := azuritetest.Options(t, testLease)
	transporttest.OperatorPaths(t, transporttest.OperatorHarness{
		Name: "azqueue",
		Open: func(t *testing.T) (transport.Transport, *catalog.Store) {
			s, err := catalog.Open(context.Background(), filepath.Join(t.TempDir(), "catalog.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return ledger.Account(open(t), ledger.New(s)), s
		},
		// The scenario's transport is wrapped by the ledger: the queues
		// are deleted through a transport of their own.
		Teardown: func(ctx context.Context, _ transport.Transport, spec transport.QueueSpec) error {
			tr, err := azqueue.Open(o)
			if err != nil {
				return err
			}
			defer tr.Close()
			return tr.DeleteQueues(ctx, spec.Name)
		},
		Oversized: func(ctx context.Context, t *testing.T, tr transport.Transport, queue string) string {
			id := fmt.Sprintf("big-%08x", rand.Uint32())
			// A text body goes into the envelope as text: 600 bytes left,
			// the original's envelope fits, the evidence (an error message
			// of 1 KiB alone) does not.
			body := strings.Repeat("b", azqueue.MaxMessageSize-600)
			if err := lily.Publish(ctx, tr, queue, []lily.Message{{EventID: id, Body: []byte(body)}}); err != nil {
				t.Fatal(err)
			}
			return id
		},
	})
}
