package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
)

// publishChunk is the most rows in one INSERT statement (9 parameters each).
const publishChunk = 100

// Publish enqueues messages in one transaction: when it returns nil, all of
// them are durable. The queue must have been declared. Messages are counted
// as accepted in the ledger unless p.Redrive is set.
func (t *Transport) Publish(ctx context.Context, p *transport.PublishParams) error {
	if len(p.Messages) == 0 {
		return nil
	}
	if err := t.checkPublish(p); err != nil {
		return err
	}
	tx, err := t.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite transport: publish: %w", err)
	}
	defer tx.Rollback()
	if err := t.enqueue(ctx, tx, p); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite transport: publish commit: %w", err)
	}
	t.signal()
	return nil
}

// checkPublish checks what Publish and PublishTx check before writing: the
// transport is open and every message has an event ID.
func (t *Transport) checkPublish(p *transport.PublishParams) error {
	if err := t.checkOpen(); err != nil {
		return err
	}
	for i := range p.Messages {
		if p.Messages[i].EventID == "" {
			return fmt.Errorf("sqlite transport: publish to %s: message %d has no event ID", p.Queue, i)
		}
	}
	return nil
}

// enqueue writes p's messages in tx: the queue must exist; they are counted
// as accepted in the ledger unless p.Redrive is set (a redriven message was
// counted when it was first accepted).
func (t *Transport) enqueue(ctx context.Context, tx *sql.Tx, p *transport.PublishParams) error {
	if err := checkQueue(ctx, tx, p.Queue); err != nil {
		return err
	}
	if err := insertMessages(ctx, tx, p.Queue, p.Messages, t.now()); err != nil {
		return err
	}
	if p.Redrive {
		return nil
	}
	return catalog.AddCountsTx(ctx, tx, p.Queue, int64(len(p.Messages)), 0)
}

func checkQueue(ctx context.Context, tx *sql.Tx, queue string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM lily_queues WHERE name = ?`, queue).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlite transport: queue %q: %w (declare it first: its [[queue]] entry in the config)", queue, transport.ErrUnknownQueue)
	}
	if err != nil {
		return fmt.Errorf("sqlite transport: look up queue %q: %w", queue, err)
	}
	return nil
}

// insertMessages writes msgs to queue, visible at visibleAt, in chunks.
func insertMessages(ctx context.Context, tx *sql.Tx, queue string, msgs []transport.Message, visibleAt int64) error {
	const cols = `INSERT INTO lily_messages(queue, event_id, msg_key, msg_type, body, headers, visible_at, enqueued_at, accounted) VALUES `
	var fullStmt *sql.Stmt
	for start := 0; start < len(msgs); start += publishChunk {
		chunk := msgs[start:min(start+publishChunk, len(msgs))]
		args := make([]any, 0, len(chunk)*9)
		for _, m := range chunk {
			var hdr []byte
			if len(m.Headers) > 0 {
				var err error
				if hdr, err = transport.MarshalHeaders(m.Headers); err != nil {
					return fmt.Errorf("sqlite transport: message %s: %w", m.EventID, err)
				}
			}
			body := m.Body
			if body == nil {
				body = []byte{}
			}
			args = append(args, queue, m.EventID, m.Key, m.Type, body, hdr, visibleAt, visibleAt, 1) // accounted: foreign.go
		}
		var err error
		if len(chunk) == publishChunk {
			if fullStmt == nil {
				if fullStmt, err = tx.PrepareContext(ctx, cols+placeholders(publishChunk, 9)); err != nil {
					return fmt.Errorf("sqlite transport: prepare insert: %w", err)
				}
				defer fullStmt.Close()
			}
			_, err = fullStmt.ExecContext(ctx, args...)
		} else {
			_, err = tx.ExecContext(ctx, cols+placeholders(len(chunk), 9), args...)
		}
		if err != nil {
			return fmt.Errorf("sqlite transport: insert into %s: %w", queue, err)
		}
	}
	return nil
}

// placeholders returns "(?,?,..),(?,?,..)" for rows tuples of width n.
func placeholders(rows, width int) string {
	tuple := "(" + qmarks(width) + ")"
	var b strings.Builder
	b.Grow(rows * (len(tuple) + 1))
	for i := 0; i < rows; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(tuple)
	}
	return b.String()
}

// qmarks returns n comma-separated question marks.
func qmarks(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// PublishTx enqueues messages inside the caller's transaction on this
// transport's database, as Publish does (the queue must have been
// declared; the ledger counts them as accepted unless p.Redrive is set).
// The catalog uses it to redrive a dead letter and mark it redriven in one
// transaction. Receivers waiting in this process notice the messages at
// their next poll (Options.PollInterval), not at once.
func (t *Transport) PublishTx(ctx context.Context, tx *sql.Tx, p *transport.PublishParams) error {
	if len(p.Messages) == 0 {
		return nil
	}
	if err := t.checkPublish(p); err != nil {
		return err
	}
	return t.enqueue(ctx, tx, p)
}
