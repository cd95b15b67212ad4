package sqlite_test

import (
	"context"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// rawInsert writes msgs into the queue table with plain SQL, as another
// program sharing the database file would: no lily.Publish, the event_id
// column ” when the message has no ID, headers in the column's documented
// encoding (transport.MarshalHeaders), no accounted column.
func rawInsert(ctx context.Context, t *testing.T, tr transport.Transport, queue string, msgs []transporttest.ForeignMessage) {
	t.Helper()
	db := tr.(*sqlite.Transport).DB()
	now := time.Now().UnixMilli()
	for _, m := range msgs {
		var hdr []byte
		if len(m.Headers) > 0 {
			var err error
			if hdr, err = transport.MarshalHeaders(m.Headers); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO lily_messages(queue, event_id, body, headers, visible_at, enqueued_at)
			VALUES (?, ?, ?, ?, ?, ?)`, queue, m.ID, m.Body, hdr, now, now); err != nil {
			t.Fatalf("raw insert into %s: %v", queue, err)
		}
	}
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
