package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
)

// riverArgs is the job of the River run: it carries the message body (the
// same BodySize bytes as every other system; River stores args as JSON, so
// the body travels base64-encoded).
type riverArgs struct {
	Body []byte `json:"body"`
}

// Kind names the job kind for River.
func (riverArgs) Kind() string { return "lilybench" }

// riverWorker is the no-op worker: it records the body and returns nil.
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	tr *tracker
}

// Work records the job's body with the tracker and succeeds.
func (w *riverWorker) Work(_ context.Context, job *river.Job[riverArgs]) error {
	w.tr.consumed(job.Args.Body)
	return nil
}

// RunRiver measures River (github.com/riverqueue/river) on SQLite through
// its riversqlite driver, on the same modernc.org/sqlite database/sql
// driver and DSN as every other system (WAL, synchronous FULL, one
// connection, BEGIN IMMEDIATE). River's migrations run with rivermigrate
// before the clock starts. One goroutine inserts PublishBatch jobs per
// Client.InsertMany call (one transaction each) while the client works
// them with RiverWorkers workers on the default queue (a no-op worker) and
// completes them (River's batching completer). The clock stops when N
// EventKindJobCompleted events have arrived: River emits them after the
// completion is written.
func RunRiver(ctx context.Context, c Config) (Result, error) {
	c = c.WithDefaults()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	// openDB's schema is empty: River creates its own with rivermigrate.
	db, cleanup, err := openDB(ctx, c, "river", "SELECT 1")
	if err != nil {
		return Result{}, fmt.Errorf("river: %w", err)
	}
	defer cleanup()
	driver := riversqlite.New(db)
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: discard})
	if err != nil {
		return Result{}, fmt.Errorf("river: migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return Result{}, fmt.Errorf("river: migrate up: %w", err)
	}

	tr := newTracker(c.N)
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{tr: tr})
	client, err := river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: c.RiverWorkers}},
		Workers:           workers,
		FetchCooldown:     c.RiverFetchCooldown,
		FetchPollInterval: c.RiverFetchPoll,
		Logger:            discard,
	})
	if err != nil {
		return Result{}, fmt.Errorf("river: client: %w", err)
	}
	// The channel holds every event of the run, so that none is dropped
	// (River drops events that would overflow it).
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled, river.EventKindJobSnoozed},
		ChanSize: c.N + 1000,
	})
	defer unsubscribe()
	errc := make(chan error, 3)
	go func() {
		for e := range events {
			if e.Kind != river.EventKindJobCompleted {
				select {
				case errc <- fmt.Errorf("conservation: job %d: event %s (%v)", e.Job.ID, e.Kind, e.Job.Errors):
				default:
				}
				continue
			}
			tr.acked(1)
		}
	}()

	params := make([]river.InsertManyParams, c.N)
	for i, b := range makeBodies(c) {
		params[i] = river.InsertManyParams{Args: riverArgs{Body: b}}
	}
	if err := client.Start(ctx); err != nil {
		return Result{}, fmt.Errorf("river: start: %w", err)
	}
	stopClient := func() error {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return client.Stop(stopCtx)
	}
	m := startMeter()
	go func() {
		for i := 0; i < c.N; i += c.PublishBatch {
			if _, err := client.InsertMany(ctx, params[i:min(i+c.PublishBatch, c.N)]); err != nil {
				errc <- fmt.Errorf("insert: %w", err)
				return
			}
		}
	}()
	waitErr := tr.wait(ctx, errc)
	res := m.stop()
	if err := stopClient(); err != nil && waitErr == nil {
		waitErr = fmt.Errorf("stop: %w", err)
	}
	if waitErr != nil {
		return Result{}, fmt.Errorf("river: %w", waitErr)
	}
	// River sets no pragma, but check that the durability held to the end.
	if err := errors.Join(tr.check(), checkRiverDone(context.WithoutCancel(ctx), db, c.N), checkPragmas(context.WithoutCancel(ctx), db)); err != nil {
		return Result{}, fmt.Errorf("river: %w", err)
	}
	return res.done("River on SQLite (riversqlite)", c.N,
		fmt.Sprintf("1 goroutine: Client.InsertMany %d jobs/call (one tx); Client with %d workers on the default queue, no-op worker, FetchCooldown=%s FetchPollInterval=%s, River's batch completer",
			c.PublishBatch, c.RiverWorkers, c.RiverFetchCooldown, c.RiverFetchPoll)), nil
}

// checkRiverDone fails unless the river_job table holds exactly n jobs,
// all completed (River keeps completed jobs for a day by default).
func checkRiverDone(ctx context.Context, db *sql.DB, n int) error {
	var total, completed int64
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(*) FILTER (WHERE state = 'completed') FROM river_job`).Scan(&total, &completed); err != nil {
		return fmt.Errorf("conservation: count river_job: %w", err)
	}
	if total != int64(n) || completed != int64(n) {
		return fmt.Errorf("conservation: river_job holds %d jobs, %d completed, want %d and %d", total, completed, n, n)
	}
	return nil
}
