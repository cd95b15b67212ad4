package transporttest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/lily-mq/lily/transport"
)

// InsertRaw writes msgs into the SQLite store's queue table (db is the
// store's database, sqlite.Transport.DB) with plain SQL, as another
// program sharing the database file would: no lily.Publish, an empty
// event_id column when the message has no ID, headers in the column's
// documented encoding (transport.MarshalHeaders), no accounted column.
func InsertRaw(ctx context.Context, t testing.TB, db *sql.DB, queue string, msgs []ForeignMessage) {
	t.Helper()
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
