package nats_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/transporttest"
)

// operatorHarness runs the operator paths on the NATS server with the
// catalog cat opens. A Lily-declared stream has Lily's consumer as its
// only reader (no fan-out); its dead-letter stream honours dlq_max_length
// and refuses what is over it (discard new), and the server refuses a
// message over max_payload: the "full DLQ" and "oversized" scenarios run.
func operatorHarness(cat func(*testing.T) *catalog.Store) transporttest.OperatorHarness {
	return transporttest.OperatorHarness{
		Name: "nats",
		Open: func(t *testing.T) (transport.Transport, *catalog.Store) {
			s := cat(t)
			return ledger.Account(open(t), ledger.New(s)), s
		},
		Teardown: teardown,
		FullDLQ:  true,
		Oversized: func(ctx context.Context, t *testing.T, tr transport.Transport, queue string) string {
			id := fmt.Sprintf("big-%08x", rand.Uint32())
			// 512 bytes left under the server's max_payload: the
			// original fits, its evidence (an error message of 1 KiB)
			// does not.
			body := strings.Repeat("b", int(base(tr).Conn().MaxPayload())-512)
			if err := lily.Publish(ctx, tr, queue, []lily.Message{{EventID: id, Body: []byte(body)}}); err != nil {
				t.Fatal(err)
			}
			return id
		},
	}
}

// TestOperatorPaths runs the operator paths (redrive, redirect, sample,
// rate, cancel, a runner that dies mid-job, a full DLQ, an oversized dead
// letter) with the catalog in a SQLite file.
func TestOperatorPaths(t *testing.T) {
	t.Parallel()
	transporttest.OperatorPaths(t, operatorHarness(openCatalog))
}

// TestOperatorPathsPostgresCatalog runs them with the catalog on
// PostgreSQL.
func TestOperatorPathsPostgresCatalog(t *testing.T) {
	t.Parallel()
	transporttest.OperatorPaths(t, operatorHarness(openPostgresCatalog))
}
