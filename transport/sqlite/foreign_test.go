package sqlite_test

import (
	"context"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// rawInsert writes msgs into the queue table with plain SQL, as another
// program sharing the database file would (transporttest.InsertRaw).
func rawInsert(ctx context.Context, t *testing.T, tr transport.Transport, queue string, msgs []transporttest.ForeignMessage) {
	t.Helper()
	transporttest.InsertRaw(ctx, t, tr.(*sqlite.Transport).DB(), queue, msgs)
}

// TestForeignProducers runs the foreign-producer harness on the embedded
// store: rows inserted with raw SQL.
func TestForeignProducers(t *testing.T) {
	transporttest.RunForeign(t, transporttest.ForeignHarness{
		Name: "sqlite",
		Open: func(t *testing.T) (transport.Transport, *catalog.Store) {
			tr := harness().New(t).(*sqlite.Transport)
			t.Cleanup(func() { tr.Close() })
			cat, err := catalog.New(context.Background(), tr.DB())
			if err != nil {
				t.Fatal(err)
			}
			return tr, cat
		},
		PublishRaw: rawInsert,
		ForeignHeaders: map[string]any{
			"x-foreign-bytes":  []byte{0, 1, 0xff},
			"x-foreign-nested": map[string]any{"inner": "v", "list": []any{"a", true}},
			"x-foreign-bool":   true,
			"x-foreign-float":  1.5,
		},
		HugeHeader:  256 << 10, // no frame limit here: large, and quick to encode under -race
		ForgedCount: map[string]any{"x-delivery-count": int64(99)},
	})
}
