package sqs_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqs"
	"github.com/lily-mq/lily/transport/transporttest"
)

// operatorHarness runs the operator paths on the emulator with the
// catalog cat opens. An SQS queue has one set of readers (no fan-out) and
// no max-length (never full), but refuses a message over 256 KiB: the
// "oversized" scenario runs, with a body that fits alone and not with the
// evidence of a dead-lettering.
func operatorHarness(cat func(*testing.T) *catalog.Store) transporttest.OperatorHarness {
	return transporttest.OperatorHarness{
		Name: "sqs",
		Open: func(t *testing.T) (transport.Transport, *catalog.Store) {
			s := cat(t)
			return ledger.Account(open(t), ledger.New(s)), s
		},
		Oversized: func(ctx context.Context, t *testing.T, tr transport.Transport, queue string) string {
			id := fmt.Sprintf("big-%08x", rand.Uint32())
			// 600 bytes left: the original's pack fits, the evidence
			// (an error message of 1 KiB alone) does not.
			body := strings.Repeat("b", sqs.MaxMessageSize-600)
			if err := lily.Publish(ctx, tr, queue, []lily.Message{{EventID: id, Body: []byte(body)}}); err != nil {
				t.Fatal(err)
			}
			return id
		},
	}
}

// TestOperatorPaths runs the operator paths (redrive, redirect, sample,
// rate, cancel, a runner that dies mid-job, an oversized dead letter) on
// the emulator with the catalog in a SQLite file.
func TestOperatorPaths(t *testing.T) {
	t.Parallel()
	transporttest.OperatorPaths(t, operatorHarness(func(t *testing.T) *catalog.Store {
		s, err := catalog.Open(context.Background(), filepath.Join(t.TempDir(), "catalog.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}))
}

// TestOperatorPathsPostgresCatalog runs them with the catalog on
// PostgreSQL.
func TestOperatorPathsPostgresCatalog(t *testing.T) {
	t.Parallel()
	transporttest.OperatorPaths(t, operatorHarness(func(t *testing.T) *catalog.Store {
		s, err := catalog.OpenPostgres(context.Background(), pgtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}))
}
