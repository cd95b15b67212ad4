package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// RelayObserver is told what a Relay's publishes and rounds did, for
// metrics (lilyprom.RelayMetrics is one). Its methods are called from the
// relay's goroutine and must not block.
type RelayObserver interface {
	// Published: n rows of queue were confirmed by the transport (they are
	// marked published in the round's transaction; a crash before that
	// publishes them again, with the same event IDs).
	Published(queue string, n int)
	// PublishFailed: n rows of queue were not confirmed (err says why);
	// they stay in the outbox and are tried again after their backoff.
	PublishFailed(queue string, n int, err error)
	// RoundFailed: a round could not read or mark the outbox (err: the
	// database's error); nothing it took is lost, the next round takes it
	// again.
	RoundFailed(err error)
}

// QueueBacklog is what waits unpublished in an outbox for one queue.
type QueueBacklog struct {
	// Queue is the destination queue.
	Queue string `json:"queue"`
	// Pending rows are not published yet.
	Pending int64 `json:"pending"`
	// Failing of them had at least one publish the transport did not
	// confirm.
	Failing int64 `json:"failing"`
	// Oldest is when the oldest pending row was added.
	Oldest time.Time `json:"oldest"`
}

// backlogQuery reads the unpublished rows per queue (the partial index
// lily_outbox_pending holds exactly those rows).
const backlogQuery = `SELECT queue, COUNT(*), SUM(CASE WHEN attempts > 0 THEN 1 ELSE 0 END), MIN(created_at)
	FROM lily_outbox WHERE published_at IS NULL GROUP BY queue ORDER BY queue`

// pgxQueryDB is a pgx pool or connection that can run a query.
type pgxQueryDB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Backlog returns what waits unpublished in db's outbox, per queue (in
// queue order; a queue with nothing pending is not listed). A backlog
// whose oldest row keeps ageing means no relay runs, or its publishes
// fail. It reads only the unpublished rows, so it stays cheap while the
// relay keeps up.
func Backlog(ctx context.Context, db DB) ([]QueueBacklog, error) {
	var (
		out []QueueBacklog
		err error
	)
	scan := func(s scanner) error {
		var b QueueBacklog
		var oldest int64
		if err := s.Scan(&b.Queue, &b.Pending, &b.Failing, &oldest); err != nil {
			return err
		}
		b.Oldest = time.UnixMilli(oldest)
		out = append(out, b)
		return nil
	}
	switch h := db.(type) {
	case *sql.DB:
		var rs *sql.Rows
		if rs, err = h.QueryContext(ctx, backlogQuery); err == nil {
			defer rs.Close()
			for err == nil && rs.Next() {
				err = scan(rs)
			}
			if err == nil {
				err = rs.Err()
			}
		}
	case pgxQueryDB:
		var rs pgx.Rows
		if rs, err = h.Query(ctx, backlogQuery); err == nil {
			defer rs.Close()
			for err == nil && rs.Next() {
				err = scan(rs)
			}
			if err == nil {
				err = rs.Err()
			}
		}
	default:
		_, err = dialectOf(db)
		if err == nil {
			err = fmt.Errorf("database of type %T cannot run a query", db)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: read the backlog: %w (did you run outbox.Migrate?)", err)
	}
	return out, nil
}
