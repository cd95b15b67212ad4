package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/lily-mq/lily/transport"
)

// Publish enqueues messages in one transaction (shared with concurrent
// writes: group.go): when it returns nil, all of them are durable. The
// queue must have been declared. Messages are counted as accepted in the
// ledger unless p.Redrive is set.
func (t *Transport) Publish(ctx context.Context, p *transport.PublishParams) error {
	if len(p.Messages) == 0 {
		return nil
	}
	if err := t.checkPublish(p); err != nil {
		return err
	}
	w := &write{kind: writePublish, what: "publish", readies: true, queue: p.Queue, count: len(p.Messages)}
	w.run = func(ctx context.Context, tx *sql.Tx) error {
		w.wakes = true
		return t.enqueue(ctx, tx, p)
	}
	return t.write(ctx, w) // group.go: committed when it returns nil
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
	if err := t.checkQueue(ctx, tx, p.Queue); err != nil {
		return err
	}
	if err := t.insertMessages(ctx, tx, p.Queue, p.Messages, t.now()); err != nil {
		return err
	}
	if p.Redrive {
		return nil
	}
	return t.st.ledger.AddTx(ctx, tx, p.Queue, int64(len(p.Messages)), 0)
}

func (t *Transport) checkQueue(ctx context.Context, tx *sql.Tx, queue string) error {
	var one int
	err := tx.StmtContext(ctx, t.st.checkQueue).QueryRowContext(ctx, queue).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlite transport: queue %q: %w (declare it first: its [[queue]] entry in the config)", queue, transport.ErrUnknownQueue)
	}
	if err != nil {
		return fmt.Errorf("sqlite transport: look up queue %q: %w", queue, err)
	}
	return nil
}

// insertMessages writes msgs to queue, visible at visibleAt, through the
// prepared INSERTs: chunks of publishChunk rows, the rest in exact
// power-of-two chunks.
func (t *Transport) insertMessages(ctx context.Context, tx *sql.Tx, queue string, msgs []transport.Message, visibleAt int64) error {
	var full *sql.Stmt // bound to tx on first use
	args := make([]any, 0, min(len(msgs), publishChunk)*9)
	for start := 0; start < len(msgs); {
		var st *sql.Stmt
		n := len(msgs) - start
		var err error
		if n >= publishChunk {
			if full == nil {
				if full, err = t.st.bind(ctx, tx, t.st.insertFull); err != nil {
					return fmt.Errorf("sqlite transport: insert into %s: %w", queue, err)
				}
			}
			st, n = full, publishChunk
		} else {
			var shape *lazyStmt
			shape, n = t.st.insertPart.exact(n)
			if st, err = t.st.bind(ctx, tx, shape); err != nil {
				return fmt.Errorf("sqlite transport: insert into %s: %w", queue, err)
			}
		}
		args = args[:0]
		for _, m := range msgs[start : start+n] {
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
			args = append(args, queue, m.EventID, orNull(m.Key), orNull(m.Type), body, hdr, visibleAt, visibleAt)
		}
		res, err := st.ExecContext(ctx, args...)
		if err != nil {
			return fmt.Errorf("sqlite transport: insert into %s: %w", queue, err)
		}
		if got, err := res.RowsAffected(); err != nil || got != int64(n) {
			// INSERT OR IGNORE (stmts.go) skipped a row: fail the publish.
			return fmt.Errorf("sqlite transport: insert into %s: %d of %d rows inserted (%v)", queue, got, n, err)
		}
		start += n
	}
	return nil
}

// orNull is nil for "" (stored as the empty string by insertSQL, without
// a buffer), else s.
func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
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
