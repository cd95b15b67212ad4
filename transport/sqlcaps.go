package transport

import (
	"context"
	"database/sql"
)

// The capabilities of a transport whose queues live in a SQL database (the
// SQLite transport), which the catalog's redrive uses when the queues and
// the catalog share that database.

// TxPublisher is implemented by a transport whose queues live in a SQL
// database. When its DB is the catalog's own handle, a redrive publishes
// and marks the entries in one transaction: no duplicate even after a
// crash, and half the commits.
type TxPublisher interface {
	// Publish publishes as Transport.Publish does.
	Publish(ctx context.Context, p *PublishParams) error
	// DB returns the transport's database handle.
	DB() *sql.DB
	// PublishTx enqueues p's messages inside tx, as Publish would.
	PublishTx(ctx context.Context, tx *sql.Tx, p *PublishParams) error
}

// MessageStatus is what a transport's queue knows of a message it holds.
type MessageStatus int

// Message statuses (QueueInspector).
const (
	// MessageWaiting: in the queue, not received by any consumer yet.
	MessageWaiting MessageStatus = iota + 1
	// MessageReceived: received by a consumer, not settled yet.
	MessageReceived
	// MessageRetried: a retry copy — a consumer failed on it at least once.
	MessageRetried
)

// QueueInspector is implemented by a transport whose queues the catalog can
// look into (the SQLite transport). MessageStatuses reports the status of
// each of eventIDs still in queue; an event ID missing from the map is no
// longer there: acked, unless it was dead-lettered again (a new catalog
// entry). Without it, a redrive job's sample is proved by the ledger's
// events instead (kind "acked", which the counting wrapper records before
// each broker ack).
type QueueInspector interface {
	MessageStatuses(ctx context.Context, queue string, eventIDs []string) (map[string]MessageStatus, error)
}
