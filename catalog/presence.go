package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/internal/catalogdb"
)

// Audit actions of queue pauses (docs/design.md §9.10).
const (
	ActionPause  = "pause"
	ActionResume = "resume"
)

// Audit outcomes of queue pauses: the queue was paused or resumed, or it
// already was (the request changed nothing, and says so).
const (
	OutcomePaused        = "paused"
	OutcomeResumed       = "resumed"
	OutcomeAlreadyPaused = "already_paused"
	OutcomeNotPaused     = "not_paused"
)

// StaleBeats is how many of its heartbeat intervals an instance may miss
// before it is shown stale: one late beat (a slow catalog, a GC pause) is
// not a dead process.
const StaleBeats = 3

// Consumer is one consumer instance as its heartbeat last wrote it
// (lily_consumers).
type Consumer struct {
	// Instance is the consumer's instance ID (lily.ConsumerOptions.Instance).
	Instance string `json:"instance"`
	// Queue is the queue it consumes.
	Queue string `json:"queue"`
	// Name and Version identify the consuming code.
	Name    string `json:"name"`
	Version string `json:"version"`
	// Host and PID are where it runs.
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Breaker is its circuit breaker's state ("closed", "open",
	// "half-open"; "closed" when the queue has none).
	Breaker string `json:"breaker"`
	// Paused says the instance has stopped taking messages because its
	// queue is paused (it observed the pause, not only that one exists).
	Paused bool `json:"paused"`
	// HeartbeatMillis is the instance's heartbeat interval.
	HeartbeatMillis int64 `json:"heartbeat_ms"`
	// StartedAt is when the instance started; LastSeen its last heartbeat.
	StartedAt time.Time `json:"started_at"`
	LastSeen  time.Time `json:"last_seen"`
	// Stale is set by Consumers: the instance missed StaleBeats heartbeats.
	Stale bool `json:"stale"`
}

// Pause is a paused queue (lily_queue_pauses).
type Pause struct {
	Queue    string    `json:"queue"`
	Reason   string    `json:"reason"`
	Actor    string    `json:"actor"`
	PausedAt time.Time `json:"paused_at"`
}

// Heartbeat writes c's row: one upsert, so that an instance has one row
// however long it runs.
func (s *Store) Heartbeat(ctx context.Context, c *Consumer) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO lily_consumers(instance, queue, name, version, host, pid, breaker, paused, heartbeat_ms, started_at, last_seen)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(instance) DO UPDATE SET queue = excluded.queue, name = excluded.name, version = excluded.version,
			host = excluded.host, pid = excluded.pid, breaker = excluded.breaker, paused = excluded.paused,
			heartbeat_ms = excluded.heartbeat_ms, started_at = excluded.started_at, last_seen = excluded.last_seen`,
		c.Instance, c.Queue, c.Name, c.Version, c.Host, c.PID, c.Breaker, catalogdb.BoolInt(c.Paused),
		c.HeartbeatMillis, c.StartedAt.UnixMilli(), c.LastSeen.UnixMilli())
	if err != nil {
		return fmt.Errorf("catalog: write the heartbeat of consumer %s: %w", c.Instance, err)
	}
	return nil
}

// RemoveConsumer deletes instance's row: it stopped gracefully, so it is
// neither running nor stale.
func (s *Store) RemoveConsumer(ctx context.Context, instance string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM lily_consumers WHERE instance = ?`, instance); err != nil {
		return fmt.Errorf("catalog: remove consumer %s: %w", instance, err)
	}
	return nil
}

// PruneConsumers deletes the rows of instances last seen before before
// (long-dead processes) and returns how many.
func (s *Store) PruneConsumers(ctx context.Context, before time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM lily_consumers WHERE last_seen < ?`, before.UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("catalog: prune consumers: %w", err)
	}
	return res.RowsAffected()
}

// Consumers returns every consumer instance, of queue (or of every queue
// when empty), by queue and instance, each marked Stale when now is more
// than StaleBeats of its heartbeat intervals past its last heartbeat.
func (s *Store) Consumers(ctx context.Context, queue string, now time.Time) ([]Consumer, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT instance, queue, name, version, host, pid, breaker, paused, heartbeat_ms, started_at, last_seen
		FROM lily_consumers WHERE (? = '' OR queue = ?) ORDER BY queue, instance`, queue, queue)
	if err != nil {
		return nil, fmt.Errorf("catalog: list consumers: %w", err)
	}
	defer rows.Close()
	out := []Consumer{}
	for rows.Next() {
		var c Consumer
		var paused, started, seen int64
		if err := rows.Scan(&c.Instance, &c.Queue, &c.Name, &c.Version, &c.Host, &c.PID, &c.Breaker, &paused, &c.HeartbeatMillis, &started, &seen); err != nil {
			return nil, fmt.Errorf("catalog: list consumers: %w", err)
		}
		c.Paused = paused != 0
		c.StartedAt, c.LastSeen = time.UnixMilli(started).UTC(), time.UnixMilli(seen).UTC()
		c.Stale = now.Sub(c.LastSeen) > StaleBeats*time.Duration(c.HeartbeatMillis)*time.Millisecond
		out = append(out, c)
	}
	return out, rows.Err()
}

// PauseQueue pauses queue's consumers and records the decision in the
// audit log, in one transaction. It reports whether the queue was paused
// by this call (false: it already was; the earlier reason is kept, and the
// request is audited as already_paused).
func (s *Store) PauseQueue(ctx context.Context, queue, reason, actor string, now time.Time) (bool, error) {
	if actor == "" {
		actor = DefaultActor()
	}
	return s.pauseDecision(ctx, queue, actor, now, ActionPause, reason, OutcomePaused, OutcomeAlreadyPaused,
		`INSERT INTO lily_queue_pauses(queue, reason, actor, paused_at) VALUES (?, ?, ?, ?) ON CONFLICT(queue) DO NOTHING`,
		queue, reason, actor, now.UnixMilli())
}

// ResumeQueue lifts queue's pause and records the decision in the audit
// log, in one transaction. It reports whether the queue was paused.
func (s *Store) ResumeQueue(ctx context.Context, queue, actor string, now time.Time) (bool, error) {
	return s.pauseDecision(ctx, queue, actor, now, ActionResume, "", OutcomeResumed, OutcomeNotPaused,
		`DELETE FROM lily_queue_pauses WHERE queue = ?`, queue)
}

// pauseDecision runs stmt with args and audits action, with outcome
// changedOutcome or sameOutcome by whether stmt changed a row, in one
// transaction.
func (s *Store) pauseDecision(ctx context.Context, queue, actor string, now time.Time, action, detail, changedOutcome, sameOutcome, stmt string, args ...any) (bool, error) {
	d := catalogdb.NewDecision("", actor, pauseSelector(queue), func() time.Time { return now })
	var changed bool
	start := time.Now()
	err := s.db.WithTx(ctx, func(tx *catalogdb.Tx) error {
		res, err := tx.ExecContext(ctx, stmt, args...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		changed = n > 0
		outcome := changedOutcome
		if !changed {
			outcome = sameOutcome
		}
		return catalogdb.AppendAudit(ctx, tx, d.Record(action, outcome, false, nil, detail))
	})
	if s.tracer != nil {
		// One span for the queue: a pause is about no message, so it has
		// no link; the outcome is known once the transaction committed.
		outcome := sameOutcome
		if changed {
			outcome = changedOutcome
		}
		s.emitSpans(ctx, start, []writeSpan{{name: action + " " + queue, kind: trace.SpanKindInternal, table: "lily_queue_pauses",
			attrs: []attribute.KeyValue{AttrDecision.String(action), AttrActor.String(d.Actor), AttrOp.String(d.Op), AttrOutcome.String(outcome),
				attribute.String("messaging.destination.name", queue)}}}, err)
	}
	if err != nil {
		return false, fmt.Errorf("catalog: %s queue %s: %w", action, queue, err)
	}
	return changed, nil
}

// Pauses returns the paused queues, by name.
func (s *Store) Pauses(ctx context.Context) ([]Pause, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT queue, reason, actor, paused_at FROM lily_queue_pauses ORDER BY queue`)
	if err != nil {
		return nil, fmt.Errorf("catalog: list paused queues: %w", err)
	}
	defer rows.Close()
	out := []Pause{}
	for rows.Next() {
		var p Pause
		var at int64
		if err := rows.Scan(&p.Queue, &p.Reason, &p.Actor, &at); err != nil {
			return nil, fmt.Errorf("catalog: list paused queues: %w", err)
		}
		p.PausedAt = time.UnixMilli(at).UTC()
		out = append(out, p)
	}
	return out, rows.Err()
}

// pauseSelector is the audit selector of a pause or resume of queue.
func pauseSelector(queue string) string {
	b, _ := json.Marshal(map[string]string{"queue": queue})
	return string(b)
}

// QueuePause returns queue's pause, and whether it is paused.
func (s *Store) QueuePause(ctx context.Context, queue string) (Pause, bool, error) {
	ps, err := s.Pauses(ctx)
	if err != nil {
		return Pause{}, false, err
	}
	for _, p := range ps {
		if p.Queue == queue {
			return p, true, nil
		}
	}
	return Pause{}, false, nil
}
