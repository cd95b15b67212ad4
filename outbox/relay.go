package outbox

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
)

// Publisher is the transport the relay publishes through, with
// confirmation: every Lily transport (SQLite, RabbitMQ with publisher
// confirms, Kafka with acks=all) is one.
type Publisher = transport.Transport

// RelayOptions configure a Relay. The zero value means the defaults.
type RelayOptions struct {
	// Batch is the most rows taken per round. Defaults to 100.
	Batch int
	// Poll is how long Run waits when nothing was due. Defaults to 200ms.
	Poll time.Duration
	// MinBackoff is the wait before a row whose publish failed is tried
	// again; it doubles per failed attempt up to MaxBackoff. These are the
	// relay's own publish retries, counted in the row's attempts column —
	// never the framework's x-retry-count, which the relay does not touch.
	// Defaults to 100ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// PublishTimeout bounds one publish (the confirm wait). Defaults to 30s.
	PublishTimeout time.Duration
	// Logger receives publish failures. Defaults to slog.Default().
	Logger *slog.Logger
	// Observer is told what each publish and round did (metrics:
	// lilyprom.RelayMetrics). Defaults to none.
	Observer RelayObserver
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
}

func (o RelayOptions) withDefaults() RelayOptions {
	if o.Batch <= 0 {
		o.Batch = 100
	}
	if o.Poll <= 0 {
		o.Poll = 200 * time.Millisecond
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 30 * time.Second
	}
	o.MaxBackoff = max(o.MaxBackoff, o.MinBackoff)
	if o.PublishTimeout <= 0 {
		o.PublishTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Relay publishes the outbox's rows through a transport and marks each
// row published only after the transport confirmed it: at-least-once (a
// crash between the confirm and the mark publishes the row again, with the
// same event ID, which the consumer's inbox absorbs). A key's next row is
// not published before the previous one is confirmed.
//
// On PostgreSQL any number of relays may run on one database: each round
// locks the oldest unpublished row of each key (FOR UPDATE SKIP LOCKED)
// and the rows behind it, in one transaction held across the publish, so
// two relays never publish one row (except after a crash between confirm
// and mark) and never reorder a key. On SQLite run one relay per database
// file: rows are read, published and then marked, without locks (SQLite
// has one writer, and a transaction held across the publish would stall
// the application's).
type Relay struct {
	db  DB
	d   dialect
	pub Publisher
	o   RelayOptions
}

// NewRelay returns a relay of db's outbox (see DB) into pub.
func NewRelay(db DB, pub Publisher, o RelayOptions) (*Relay, error) {
	d, err := dialectOf(db)
	if err != nil {
		return nil, fmt.Errorf("outbox: relay: %w", err)
	}
	if pub == nil {
		return nil, errors.New("outbox: relay: nil publisher: pass a transport (sqlite, rabbitmq, kafka)")
	}
	return &Relay{db: db, d: d, pub: pub, o: o.withDefaults()}, nil
}

// RoundResult is what one round did.
type RoundResult struct {
	// Published rows were confirmed and marked.
	Published int `json:"published"`
	// Failed rows were not confirmed; they are tried again after their
	// backoff, and the rows of their keys wait behind them.
	Failed int `json:"failed"`
}

// Run relays until ctx ends, and returns nil then.
func (r *Relay) Run(ctx context.Context) error {
	for {
		res, err := r.RunOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			r.o.Logger.Error("outbox relay: round failed", "err", err)
			if r.o.Observer != nil {
				r.o.Observer.RoundFailed(err)
			}
		}
		if err != nil || res.Published == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(r.o.Poll):
			}
		}
	}
}

// row is one outbox row taken by a round.
type row struct {
	id       int64
	queue    string
	okey     string
	attempts int
	msg      lily.Message
}

const selectCols = `id, queue, okey, event_id, msg_key, msg_type, body, headers, schema_version, attempts`

// RunOnce relays one round: the due head row of each key (at most Batch
// keys) and the rows behind it, published per queue in ID order.
func (r *Relay) RunOnce(ctx context.Context) (RoundResult, error) {
	switch db := r.db.(type) {
	case *sql.DB:
		if r.d == dialectSQLite {
			return r.roundSQLite(ctx, db)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return RoundResult{}, fmt.Errorf("outbox: relay: begin: %w", err)
		}
		defer tx.Rollback()
		res, err := r.round(ctx, sqlQuerier{tx}, true)
		if err != nil {
			return res, err
		}
		if err := tx.Commit(); err != nil {
			return RoundResult{}, fmt.Errorf("outbox: relay: commit the marks: %w", err)
		}
		return res, nil
	case pgxDB:
		tx, err := db.Begin(ctx)
		if err != nil {
			return RoundResult{}, fmt.Errorf("outbox: relay: begin: %w", err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		res, err := r.round(ctx, pgxQuerier{tx}, true)
		if err != nil {
			return res, err
		}
		if err := tx.Commit(ctx); err != nil {
			return RoundResult{}, fmt.Errorf("outbox: relay: commit the marks: %w", err)
		}
		return res, nil
	}
	return RoundResult{}, fmt.Errorf("outbox: relay: database of type %T", r.db)
}

// roundSQLite reads and publishes outside a transaction, then marks in
// one (the single relay of a SQLite file).
func (r *Relay) roundSQLite(ctx context.Context, db *sql.DB) (RoundResult, error) {
	rows, err := r.take(ctx, sqlQuerier{db}, false)
	if err != nil || len(rows) == 0 {
		return RoundResult{}, err
	}
	done, failed := r.publish(ctx, rows)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return RoundResult{}, fmt.Errorf("outbox: relay: begin the marks: %w", err)
	}
	defer tx.Rollback()
	res, err := r.mark(ctx, sqlQuerier{tx}, done, failed)
	if err != nil {
		return res, err
	}
	if err := tx.Commit(); err != nil {
		return RoundResult{}, fmt.Errorf("outbox: relay: commit the marks: %w", err)
	}
	return res, nil
}

// round takes, publishes and marks inside q's transaction (PostgreSQL).
func (r *Relay) round(ctx context.Context, q querier, lock bool) (RoundResult, error) {
	rows, err := r.take(ctx, q, lock)
	if err != nil || len(rows) == 0 {
		return RoundResult{}, err
	}
	done, failed := r.publish(ctx, rows)
	return r.mark(ctx, q, done, failed)
}

// take selects the due heads of their keys (locked, skipping keys another
// relay holds) and then the unpublished rows behind those heads, which no
// other relay can take while the heads are unpublished and locked.
func (r *Relay) take(ctx context.Context, q querier, lock bool) ([]row, error) {
	heads := `SELECT ` + selectCols + ` FROM lily_outbox o
		WHERE o.published_at IS NULL AND o.next_attempt_at <= $1
		AND NOT EXISTS (SELECT 1 FROM lily_outbox p WHERE p.okey = o.okey AND p.published_at IS NULL AND p.id < o.id)
		ORDER BY o.id LIMIT $2`
	if lock {
		heads += ` FOR UPDATE SKIP LOCKED`
	}
	rows, err := q.rows(ctx, heads, r.o.Now().UnixMilli(), r.o.Batch)
	if err != nil {
		return nil, fmt.Errorf("outbox: relay: select the heads: %w", err)
	}
	if len(rows) == 0 || len(rows) >= r.o.Batch {
		return rows, nil
	}
	keys := make([]any, 0, len(rows))
	first := map[string]int64{}
	for _, h := range rows {
		first[h.okey] = h.id
		keys = append(keys, h.okey)
	}
	args := append([]any{r.o.Batch - len(rows)}, keys...)
	follow := `SELECT ` + selectCols + ` FROM lily_outbox WHERE published_at IS NULL AND okey IN (` +
		placeholders(2, len(keys)) + `) ORDER BY id LIMIT $1`
	if lock {
		follow += ` FOR UPDATE`
	}
	more, err := q.rows(ctx, follow, args...)
	if err != nil {
		return nil, fmt.Errorf("outbox: relay: select the rows behind the heads: %w", err)
	}
	for _, m := range more {
		if m.id > first[m.okey] {
			rows = append(rows, m)
		}
	}
	return rows, nil
}

// publish publishes rows per queue, in ID order, and returns the IDs
// confirmed and the failed rows with their error.
func (r *Relay) publish(ctx context.Context, rows []row) (done []int64, failed []failure) {
	byQueue := map[string][]row{}
	var queues []string
	for _, rw := range rows {
		if _, ok := byQueue[rw.queue]; !ok {
			queues = append(queues, rw.queue)
		}
		byQueue[rw.queue] = append(byQueue[rw.queue], rw)
	}
	for _, q := range queues {
		rs := byQueue[q]
		sortByID(rs)
		retrying := false
		for _, rw := range rs {
			retrying = retrying || rw.attempts > 0
		}
		if !retrying {
			// First attempt: the whole group in one publish.
			if err := r.send(ctx, q, rs); err != nil {
				for _, rw := range rs {
					failed = append(failed, failure{id: rw.id, attempts: rw.attempts, err: err})
				}
				continue
			}
			for _, rw := range rs {
				done = append(done, rw.id)
			}
			continue
		}
		// A group with a row that failed before goes one row per publish:
		// a batch that failed part-way tells nothing about which rows the
		// broker took, so a full queue that takes the first few would get
		// the same few again and again. The first failure stops the group
		// for this round; the rows behind it are left as they are.
		for _, rw := range rs {
			if err := r.send(ctx, q, []row{rw}); err != nil {
				failed = append(failed, failure{id: rw.id, attempts: rw.attempts, err: err})
				break
			}
			done = append(done, rw.id)
		}
	}
	return done, failed
}

// send publishes rows to queue and waits for the confirm.
func (r *Relay) send(ctx context.Context, queue string, rs []row) error {
	msgs := make([]lily.Message, len(rs))
	for i, rw := range rs {
		msgs[i] = rw.msg
	}
	pctx, cancel := context.WithTimeout(ctx, r.o.PublishTimeout)
	defer cancel()
	err := lily.Publish(pctx, r.pub, queue, msgs)
	if err != nil {
		r.o.Logger.Warn("outbox relay: publish failed; the rows stay unpublished and are tried again",
			"queue", queue, "rows", len(rs), "err", err)
	}
	if o := r.o.Observer; o != nil {
		if err != nil {
			o.PublishFailed(queue, len(rs), err)
		} else {
			o.Published(queue, len(rs))
		}
	}
	return err
}

// mark records the round: published rows get published_at, failed ones
// an attempt, their error and their next attempt time.
// failure is a row whose publish was not confirmed.
type failure struct {
	id       int64
	attempts int // before this one
	err      error
}

// backoff is the wait after a row's n-th failed attempt (n >= 1).
func (r *Relay) backoff(n int) time.Duration {
	d := r.o.MinBackoff
	for i := 1; i < n && d < r.o.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, r.o.MaxBackoff)
}

func (r *Relay) mark(ctx context.Context, q querier, done []int64, failed []failure) (RoundResult, error) {
	now := r.o.Now()
	for i := 0; i < len(done); i += 500 {
		ids := done[i:min(i+500, len(done))]
		args := []any{now.UnixMilli()}
		for _, id := range ids {
			args = append(args, id)
		}
		if err := q.exec(ctx, `UPDATE lily_outbox SET published_at = $1, attempts = attempts + 1 WHERE id IN (`+
			placeholders(2, len(ids))+`)`, args...); err != nil {
			return RoundResult{}, fmt.Errorf("outbox: relay: mark %d rows published: %w", len(ids), err)
		}
	}
	for _, f := range failed {
		msg := f.err.Error()
		if len(msg) > 1024 {
			msg = msg[:1024]
		}
		next := now.Add(r.backoff(f.attempts + 1)).UnixMilli()
		if err := q.exec(ctx, `UPDATE lily_outbox SET attempts = attempts + 1, last_error = $1, next_attempt_at = $2 WHERE id = $3`,
			msg, next, f.id); err != nil {
			return RoundResult{}, fmt.Errorf("outbox: relay: record the failed publish of row %d: %w", f.id, err)
		}
	}
	return RoundResult{Published: len(done), Failed: len(failed)}, nil
}

// Pending counts the unpublished rows.
func (r *Relay) Pending(ctx context.Context) (int64, error) {
	var n int64
	var err error
	switch db := r.db.(type) {
	case *sql.DB:
		err = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM lily_outbox WHERE published_at IS NULL`).Scan(&n)
	case pgxRowDB:
		err = db.QueryRow(ctx, `SELECT COUNT(*) FROM lily_outbox WHERE published_at IS NULL`).Scan(&n)
	default:
		err = fmt.Errorf("database of type %T has no QueryRow", r.db)
	}
	if err != nil {
		return 0, fmt.Errorf("outbox: count the pending rows: %w", err)
	}
	return n, nil
}

type pgxRowDB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func sortByID(rs []row) {
	slices.SortFunc(rs, func(a, b row) int { return cmp.Compare(a.id, b.id) })
}

// querier runs the relay's statements on one kind of handle.
type querier interface {
	rows(ctx context.Context, q string, args ...any) ([]row, error)
	exec(ctx context.Context, q string, args ...any) error
}

type scanner interface {
	Scan(dest ...any) error
}

func scanRow(s scanner) (row, error) {
	var rw row
	var hdr string
	err := s.Scan(&rw.id, &rw.queue, &rw.okey, &rw.msg.EventID, &rw.msg.Key, &rw.msg.Type, &rw.msg.Body, &hdr,
		&rw.msg.SchemaVersion, &rw.attempts)
	if err != nil {
		return rw, err
	}
	h, err := transport.UnmarshalHeaders([]byte(hdr))
	if err != nil {
		return rw, fmt.Errorf("row %d (%s): headers: %w", rw.id, rw.msg.EventID, err)
	}
	if len(h) > 0 {
		rw.msg.Headers = h
	}
	return rw, nil
}

// resultRows is what *sql.Rows and pgx.Rows share.
type resultRows interface {
	scanner
	Next() bool
	Err() error
}

func scanAll(rs resultRows) ([]row, error) {
	var out []row
	for rs.Next() {
		rw, err := scanRow(rs)
		if err != nil {
			return nil, err
		}
		out = append(out, rw)
	}
	return out, rs.Err()
}

type sqlQuerier struct {
	h interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	}
}

func (s sqlQuerier) rows(ctx context.Context, q string, args ...any) ([]row, error) {
	rs, err := s.h.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	return scanAll(rs)
}

func (s sqlQuerier) exec(ctx context.Context, q string, args ...any) error {
	_, err := s.h.ExecContext(ctx, q, args...)
	return err
}

type pgxQuerier struct{ tx pgx.Tx }

func (p pgxQuerier) rows(ctx context.Context, q string, args ...any) ([]row, error) {
	rs, err := p.tx.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	return scanAll(rs)
}

func (p pgxQuerier) exec(ctx context.Context, q string, args ...any) error {
	_, err := p.tx.Exec(ctx, q, args...)
	return err
}
