package rules

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
)

// BreakerEvent is one recorded transition of a consumer's circuit breaker.
type BreakerEvent struct {
	ID       int64     `json:"id"`
	Queue    string    `json:"queue"`
	Consumer string    `json:"consumer"`
	From     string    `json:"from"`
	To       string    `json:"to"`
	At       time.Time `json:"at"`
}

// RecordBreaker stores a breaker transition of consumer on queue.
func (en *Engine) RecordBreaker(ctx context.Context, queue, consumer string, from, to lily.BreakerState, at time.Time) error {
	_, err := en.db.ExecContext(ctx, `INSERT INTO lily_breaker_events(queue, consumer, from_state, to_state, at) VALUES (?, ?, ?, ?, ?)`,
		queue, consumer, string(from), string(to), at.UnixMilli())
	if err != nil {
		return fmt.Errorf("catalog: record the breaker of %s: %w", queue, err)
	}
	return nil
}

// RecordAckedVersion notes that consumer version acked a message of queue
// at at (first and last time seen).
func (en *Engine) RecordAckedVersion(ctx context.Context, queue, version string, at time.Time) error {
	t := at.UnixMilli()
	_, err := en.db.ExecContext(ctx, `INSERT INTO lily_consumer_versions(queue, version, first_acked_at, last_acked_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (queue, version) DO UPDATE SET last_acked_at = CASE WHEN excluded.last_acked_at > lily_consumer_versions.last_acked_at
			THEN excluded.last_acked_at ELSE lily_consumer_versions.last_acked_at END`, queue, version, t, t)
	if err != nil {
		return fmt.Errorf("catalog: record consumer version %q of %s: %w", version, queue, err)
	}
	return nil
}

// AckedVersion is a consumer version that acked messages of a queue.
type AckedVersion struct {
	Queue        string    `json:"queue"`
	Version      string    `json:"version"`
	FirstAckedAt time.Time `json:"first_acked_at"`
	LastAckedAt  time.Time `json:"last_acked_at"`
}

// AckedVersions lists the consumer versions that acked messages of queue.
func (en *Engine) AckedVersions(ctx context.Context, queue string) ([]AckedVersion, error) {
	rows, err := en.db.QueryContext(ctx, `SELECT queue, version, first_acked_at, last_acked_at FROM lily_consumer_versions WHERE queue = ? ORDER BY first_acked_at, version`, queue)
	if err != nil {
		return nil, fmt.Errorf("catalog: consumer versions of %s: %w", queue, err)
	}
	defer rows.Close()
	var out []AckedVersion
	for rows.Next() {
		var v AckedVersion
		var f, l int64
		if err := rows.Scan(&v.Queue, &v.Version, &f, &l); err != nil {
			return nil, err
		}
		v.FirstAckedAt, v.LastAckedAt = time.UnixMilli(f).UTC(), time.UnixMilli(l).UTC()
		out = append(out, v)
	}
	return out, rows.Err()
}

// Outage is a breaker's outage on a queue: from its first opening after
// the previous close to the close of Closed.
type Outage struct {
	// Closed is the transition that ended the outage (to closed).
	Closed BreakerEvent `json:"closed"`
	// OpenedAt is when the breaker first opened in this outage.
	OpenedAt time.Time `json:"opened_at"`
}

// Outages lists the outages of queue's breakers that ended at or after
// since, oldest first: for each transition to closed, the first opening of
// the same consumer's breaker after its previous close.
func (en *Engine) Outages(ctx context.Context, queue string, since time.Time) ([]Outage, error) {
	rows, err := en.db.QueryContext(ctx, `SELECT c.id, c.queue, c.consumer, c.from_state, c.to_state, c.at,
		(SELECT MIN(o.at) FROM lily_breaker_events o WHERE o.queue = c.queue AND o.consumer = c.consumer AND o.to_state = 'open' AND o.id < c.id
			AND o.id > COALESCE((SELECT MAX(p.id) FROM lily_breaker_events p WHERE p.queue = c.queue AND p.consumer = c.consumer
				AND p.to_state = 'closed' AND p.id < c.id), 0))
		FROM lily_breaker_events c WHERE c.queue = ? AND c.to_state = 'closed' AND c.at >= ? ORDER BY c.id`, queue, since.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("catalog: outages of %s: %w", queue, err)
	}
	defer rows.Close()
	var out []Outage
	for rows.Next() {
		var o Outage
		var at int64
		var opened sql.NullInt64
		if err := rows.Scan(&o.Closed.ID, &o.Closed.Queue, &o.Closed.Consumer, &o.Closed.From, &o.Closed.To, &at, &opened); err != nil {
			return nil, err
		}
		if !opened.Valid {
			continue // closed without having opened: no outage
		}
		o.Closed.At, o.OpenedAt = time.UnixMilli(at).UTC(), time.UnixMilli(opened.Int64).UTC()
		out = append(out, o)
	}
	return out, rows.Err()
}

// Firing is one firing of a redrive rule: the occurrence of its
// trigger and the job it made.
type Firing struct {
	Rule       string    `json:"rule"`
	Occurrence string    `json:"occurrence"`
	Queue      string    `json:"queue"`
	FiredAt    time.Time `json:"fired_at"`
	JobID      int64     `json:"job_id"`
	Op         string    `json:"op"`
	Detail     string    `json:"detail,omitempty"`
	// State is "firing" while the job is being made, "fired" after.
	State string `json:"state"`
}

// firingStale is how long a firing may stay "firing" before another
// replica takes it for a dead one's and fires the rule again.
const firingStale = 2 * time.Minute

// ClaimFiring records that rule fires for occurrence; it reports false
// when the rule already fired (or is firing) for it, on any replica. A
// claim left "firing" for longer than firingStale (its replica died) is
// replaced.
func (en *Engine) ClaimFiring(ctx context.Context, f Firing) (bool, error) {
	if _, err := en.db.ExecContext(ctx, `DELETE FROM lily_rule_firings WHERE rule = ? AND occurrence = ? AND state = 'firing' AND fired_at < ?`,
		f.Rule, f.Occurrence, f.FiredAt.Add(-firingStale).UnixMilli()); err != nil {
		return false, fmt.Errorf("catalog: take over a stale firing of rule %s: %w", f.Rule, err)
	}
	res, err := en.db.ExecContext(ctx, `INSERT INTO lily_rule_firings(rule, occurrence, queue, fired_at, job_id, op, detail) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT DO NOTHING`, f.Rule, f.Occurrence, f.Queue, f.FiredAt.UnixMilli(), f.JobID, f.Op, f.Detail)
	if err != nil {
		return false, fmt.Errorf("catalog: record the firing of rule %s: %w", f.Rule, err)
	}
	n, _ := res.RowsAffected()
	return n == 1, nil
}

// CompleteFiring stores the job a firing made and what it did.
func (en *Engine) CompleteFiring(ctx context.Context, rule, occurrence string, jobID int64, detail string) error {
	if _, err := en.db.ExecContext(ctx, `UPDATE lily_rule_firings SET job_id = ?, detail = ?, state = 'fired' WHERE rule = ? AND occurrence = ?`,
		jobID, detail, rule, occurrence); err != nil {
		return fmt.Errorf("catalog: record the job of rule %s: %w", rule, err)
	}
	return nil
}

// ReleaseFiring forgets a firing that could not make its job (e.g. the
// queue had an active job), so that the rule fires for it later.
func (en *Engine) ReleaseFiring(ctx context.Context, rule, occurrence string) error {
	if _, err := en.db.ExecContext(ctx, `DELETE FROM lily_rule_firings WHERE rule = ? AND occurrence = ? AND state = 'firing'`, rule, occurrence); err != nil {
		return fmt.Errorf("catalog: release the firing of rule %s: %w", rule, err)
	}
	return nil
}

// Firings lists the firings of rule (every rule when empty), newest first.
func (en *Engine) Firings(ctx context.Context, rule string) ([]Firing, error) {
	q := `SELECT rule, occurrence, queue, fired_at, job_id, op, detail, state FROM lily_rule_firings`
	var args []any
	if rule != "" {
		q += ` WHERE rule = ?`
		args = append(args, rule)
	}
	rows, err := en.db.QueryContext(ctx, q+` ORDER BY fired_at DESC, rule, occurrence`, args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: rule firings: %w", err)
	}
	defer rows.Close()
	var out []Firing
	for rows.Next() {
		var f Firing
		var at int64
		if err := rows.Scan(&f.Rule, &f.Occurrence, &f.Queue, &at, &f.JobID, &f.Op, &f.Detail, &f.State); err != nil {
			return nil, err
		}
		f.FiredAt = time.UnixMilli(at).UTC()
		out = append(out, f)
	}
	return out, rows.Err()
}

// CompareVersions orders two consumer versions: dotted numbers compare
// numerically part by part ("1.10.0" > "1.9.3"; a leading "v" is ignored),
// a pre-release suffix ("1.4.0-rc1") sorts before its release, anything
// else compares as text. It returns -1, 0 or +1.
func CompareVersions(a, b string) int {
	pa, ra := splitVersion(a)
	pb, rb := splitVersion(b)
	for i := 0; i < max(len(pa), len(pb)); i++ {
		x, y := "0", "0"
		if i < len(pa) {
			x = pa[i]
		}
		if i < len(pb) {
			y = pb[i]
		}
		nx, ex := strconv.ParseUint(x, 10, 64)
		ny, ey := strconv.ParseUint(y, 10, 64)
		switch {
		case ex == nil && ey == nil && nx != ny:
			if nx < ny {
				return -1
			}
			return 1
		case (ex != nil || ey != nil) && x != y:
			return strings.Compare(x, y)
		}
	}
	switch {
	case ra == rb:
		return 0
	case ra == "":
		return 1
	case rb == "":
		return -1
	}
	return strings.Compare(ra, rb)
}

func splitVersion(v string) (parts []string, pre string) {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	v, _, _ = strings.Cut(v, "+") // build metadata does not order
	v, pre, _ = strings.Cut(v, "-")
	return strings.Split(v, "."), pre
}

// RuntimeRecorder is a lily.Hook that writes to the catalog what
// rule-driven redrive triggers on ([[redrive_rule]]): every transition of
// the consumer's circuit breaker (lily_breaker_events), and that the
// consumer's version acked messages of the queue (lily_consumer_versions,
// at most once per queue per Interval). Attach it to the consumer:
//
//	rec := rules.NewRuntimeRecorder(store, rules.RecorderParams{Consumer: "orders-worker@host1", Version: "1.4.2"})
//	lily.NewConsumer(tr, h, lily.ConsumerOptions{Queue: q, Version: "1.4.2", Hooks: []lily.Hook{rec}})
//
// A breaker transition is written synchronously (they are rare: at most
// one per cooldown); a write that fails is logged, never fails a delivery.
type RuntimeRecorder struct {
	en     *Engine
	p      RecorderParams
	mu     sync.Mutex
	lastAt map[string]time.Time
}

// RecorderParams configure a RuntimeRecorder.
type RecorderParams struct {
	// Consumer names the consumer instance whose breaker it records
	// (e.g. "name@host"); each instance has its own breaker. Defaults to
	// catalog.LeaseHolder().
	Consumer string
	// Version is the consumer's build version (ConsumerOptions.Version);
	// empty records no acks. Defaults to "".
	Version string
	// Interval is the least time between two ack records of one queue.
	// Defaults to 30s.
	Interval time.Duration
	// Timeout bounds each write. Defaults to 2s.
	Timeout time.Duration
	// Logger receives failed writes. Defaults to slog.Default().
	Logger *slog.Logger
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
}

// NewRuntimeRecorder returns the hook that records into store.
func NewRuntimeRecorder(store *catalog.Store, p RecorderParams) *RuntimeRecorder {
	if p.Consumer == "" {
		p.Consumer = catalog.LeaseHolder()
	}
	if p.Interval <= 0 {
		p.Interval = 30 * time.Second
	}
	if p.Timeout <= 0 {
		p.Timeout = 2 * time.Second
	}
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	return &RuntimeRecorder{en: New(store), p: p, lastAt: map[string]time.Time{}}
}

var _ lily.Hook = (*RuntimeRecorder)(nil)

// Observe implements lily.Hook.
func (r *RuntimeRecorder) Observe(ctx context.Context, e lily.Event) {
	switch e.Kind {
	case lily.EventBreaker:
		r.write(ctx, e.Queue, func(ctx context.Context, now time.Time) error {
			return r.en.RecordBreaker(ctx, e.Queue, r.p.Consumer, breakerFrom(e.Breaker), e.Breaker, now)
		})
	case lily.EventAcked:
		if r.p.Version == "" {
			return
		}
		now := r.p.Now()
		r.mu.Lock()
		due := now.Sub(r.lastAt[e.Queue]) >= r.p.Interval
		if due {
			r.lastAt[e.Queue] = now
		}
		r.mu.Unlock()
		if due {
			r.write(ctx, e.Queue, func(ctx context.Context, now time.Time) error {
				return r.en.RecordAckedVersion(ctx, e.Queue, r.p.Version, now)
			})
		}
	}
}

// breakerFrom is the state a breaker left to reach to: an Event carries
// only the new state, and the breaker's transitions are closed -> open ->
// half_open -> closed or back to open.
func breakerFrom(to lily.BreakerState) lily.BreakerState {
	switch to {
	case lily.BreakerOpen:
		return "" // from closed or from half_open: not known
	case lily.BreakerHalfOpen:
		return lily.BreakerOpen
	}
	return lily.BreakerHalfOpen
}

func (r *RuntimeRecorder) write(ctx context.Context, queue string, f func(context.Context, time.Time) error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.p.Timeout)
	defer cancel()
	if err := f(ctx, r.p.Now()); err != nil && !errors.Is(err, context.Canceled) {
		r.p.Logger.Warn("catalog: runtime recorder: write failed (rule-driven redrive may miss this)", "queue", queue, "err", err)
	}
}
