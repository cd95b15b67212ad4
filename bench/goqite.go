package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"maragu.dev/goqite"
	"maragu.dev/goqite/jobs"
)

// goqiteSchema is schema_sqlite.sql of maragu.dev/goqite v0.4.0 (the module
// does not export it).
const goqiteSchema = `
create table goqite (
  id text primary key default ('m_' || lower(hex(randomblob(16)))),
  created text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  updated text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  queue text not null,
  body blob not null,
  timeout text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  received integer not null default 0,
  priority integer not null default 0
) strict;

create trigger goqite_updated_timestamp after update on goqite begin
  update goqite set updated = strftime('%Y-%m-%dT%H:%M:%fZ') where id = old.id;
end;

create index goqite_queue_priority_created_idx on goqite (queue, priority desc, created);
`

const goqiteQueue = "bench"

// openGoqite opens a fresh database with Lily's DSN and goqite's schema.
func openGoqite(ctx context.Context, c Config, name string) (*sql.DB, *goqite.Queue, func(), error) {
	path, cleanup, err := tempDB(c, name)
	if err != nil {
		return nil, nil, nil, err
	}
	db, err := openSQLite(ctx, path)
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	if _, err := db.ExecContext(ctx, goqiteSchema); err != nil {
		db.Close()
		cleanup()
		return nil, nil, nil, fmt.Errorf("goqite schema: %w", err)
	}
	// Timeout and MaxReceive as Lily's defaults (visibility 30 s, delivery
	// limit 5); goqite's own defaults are 5 s and 3.
	q := goqite.New(goqite.NewOpts{DB: db, Name: goqiteQueue, Timeout: 30 * time.Second, MaxReceive: 5})
	return db, q, func() { db.Close(); cleanup() }, nil
}

// publishGoqite sends the N messages on one goroutine, PublishBatch per
// transaction: goqite has no batch send, so each batch is one
// db.BeginTx + PublishBatch × send (goqite.Queue.SendTx or jobs.CreateTx,
// one INSERT each) + Commit.
func publishGoqite(ctx context.Context, c Config, db *sql.DB, send func(*sql.Tx, []byte) error) error {
	bodies := make([][]byte, c.N)
	for i := range bodies {
		bodies[i] = makeBody(i, c.BodySize)
	}
	for i := 0; i < c.N; i += c.PublishBatch {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		for _, b := range bodies[i:min(i+c.PublishBatch, c.N)] {
			if err := send(tx, b); err != nil {
				tx.Rollback()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// checkGoqiteEmpty fails unless the goqite table is empty.
func checkGoqiteEmpty(ctx context.Context, db *sql.DB) error {
	var left int64
	if err := db.QueryRowContext(ctx, `select count(*) from goqite`).Scan(&left); err != nil {
		return err
	}
	if left != 0 {
		return fmt.Errorf("conservation: %d messages left in the goqite table", left)
	}
	return nil
}

// RunGoqite measures goqite's Queue API as its README shows it: one
// goroutine sends (SendTx, PublishBatch per transaction) while Concurrency
// goroutines loop ReceiveAndWait (one message per transaction) and Delete
// (one per transaction).
func RunGoqite(ctx context.Context, c Config) (Result, error) {
	c = c.WithDefaults()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	db, q, cleanup, err := openGoqite(ctx, c, "goqite")
	if err != nil {
		return Result{}, err
	}
	defer cleanup()

	tr := newTracker(c.N)
	recvCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, c.Concurrency+1)
	var wg sync.WaitGroup
	m := startMeter()
	for range c.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				m, err := q.ReceiveAndWait(recvCtx, c.GoqitePoll)
				if err != nil {
					if recvCtx.Err() == nil {
						errc <- fmt.Errorf("receive: %w", err)
					}
					return
				}
				tr.consumed(m.Body)
				if err := q.Delete(ctx, m.ID); err != nil {
					errc <- fmt.Errorf("delete: %w", err)
					return
				}
				tr.acked(1)
			}
		}()
	}
	go func() {
		errc <- publishGoqite(ctx, c, db, func(tx *sql.Tx, b []byte) error {
			return q.SendTx(ctx, tx, goqite.Message{Body: b})
		})
	}()
	waitErr := tr.wait(ctx, errc)
	measured := Result{}
	m.stop(&measured)
	elapsed := measured.Elapsed
	stop()
	wg.Wait()
	if waitErr != nil {
		return Result{}, fmt.Errorf("goqite: %w", waitErr)
	}
	if err := errors.Join(tr.check(), checkGoqiteEmpty(ctx, db)); err != nil {
		return Result{}, fmt.Errorf("goqite: %w", err)
	}
	return Result{
		Name: "goqite Queue (Receive/Delete)", N: c.N, Elapsed: elapsed, CPU: measured.CPU,
		WriteBytes: measured.WriteBytes, WriteCalls: measured.WriteCalls,
		Notes: fmt.Sprintf("1 goroutine: BeginTx + %d×Queue.SendTx + Commit (no batch API); %d goroutines: Queue.ReceiveAndWait(poll %s) + Queue.Delete, one tx each",
			c.PublishBatch, c.Concurrency, c.GoqitePoll),
	}, nil
}

// RunGoqiteBatched gives goqite its best shot, beyond its documented
// patterns: the same publisher, and Concurrency goroutines that each lease
// up to Batch messages in one transaction (Batch × Queue.ReceiveTx) and
// delete them in another (Batch × Queue.DeleteTx).
func RunGoqiteBatched(ctx context.Context, c Config) (Result, error) {
	c = c.WithDefaults()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	db, q, cleanup, err := openGoqite(ctx, c, "goqite-batched")
	if err != nil {
		return Result{}, err
	}
	defer cleanup()

	tr := newTracker(c.N)
	recvCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, c.Concurrency+1)
	var wg sync.WaitGroup
	m := startMeter()
	for range c.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := make([]goqite.ID, 0, c.Batch)
			for recvCtx.Err() == nil {
				ids = ids[:0]
				err := inGoqiteTx(ctx, db, func(tx *sql.Tx) error {
					for len(ids) < c.Batch {
						msg, err := q.ReceiveTx(ctx, tx)
						if err != nil || msg == nil {
							return err
						}
						tr.consumed(msg.Body)
						ids = append(ids, msg.ID)
					}
					return nil
				})
				if err != nil {
					errc <- fmt.Errorf("receive: %w", err)
					return
				}
				if len(ids) == 0 {
					select {
					case <-recvCtx.Done():
					case <-time.After(c.GoqitePoll):
					}
					continue
				}
				if err := inGoqiteTx(ctx, db, func(tx *sql.Tx) error {
					for _, id := range ids {
						if err := q.DeleteTx(ctx, tx, id); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					errc <- fmt.Errorf("delete: %w", err)
					return
				}
				tr.acked(int64(len(ids)))
			}
		}()
	}
	go func() {
		errc <- publishGoqite(ctx, c, db, func(tx *sql.Tx, b []byte) error {
			return q.SendTx(ctx, tx, goqite.Message{Body: b})
		})
	}()
	waitErr := tr.wait(ctx, errc)
	measured := Result{}
	m.stop(&measured)
	stop()
	wg.Wait()
	if waitErr != nil {
		return Result{}, fmt.Errorf("goqite batched: %w", waitErr)
	}
	if err := errors.Join(tr.check(), checkGoqiteEmpty(ctx, db)); err != nil {
		return Result{}, fmt.Errorf("goqite batched: %w", err)
	}
	return Result{
		Name: "goqite, batched through its *Tx API (not a documented pattern)", N: c.N, Elapsed: measured.Elapsed, CPU: measured.CPU,
		WriteBytes: measured.WriteBytes, WriteCalls: measured.WriteCalls,
		Notes: fmt.Sprintf("publisher as above; %d goroutines: BeginTx + up to %d×Queue.ReceiveTx + Commit, BeginTx + Queue.DeleteTx each + Commit",
			c.Concurrency, c.Batch),
	}, nil
}

// inGoqiteTx runs f in a transaction and commits it.
func inGoqiteTx(ctx context.Context, db *sql.DB, f func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// RunGoqiteJobs measures goqite's jobs runner (jobs.NewRunner with
// Limit=Concurrency): one goroutine creates jobs (jobs.CreateTx,
// PublishBatch per transaction) while the runner receives one message per
// transaction, runs the job (returns nil) and deletes it in its own
// transaction. The clock stops when the last job ran and the table is
// empty.
func RunGoqiteJobs(ctx context.Context, c Config) (Result, error) {
	c = c.WithDefaults()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	db, q, cleanup, err := openGoqite(ctx, c, "goqite-jobs")
	if err != nil {
		return Result{}, err
	}
	defer cleanup()

	tr := newTracker(c.N)
	r := jobs.NewRunner(jobs.NewRunnerOpts{Limit: c.Concurrency, PollInterval: c.GoqitePoll, Queue: q})
	ran := make(chan struct{})
	var ranCount int64
	var mu sync.Mutex
	r.Register("bench", func(_ context.Context, m []byte) error {
		tr.consumed(m)
		mu.Lock()
		ranCount++
		if ranCount == int64(c.N) {
			close(ran)
		}
		mu.Unlock()
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runnerDone := make(chan struct{})
	errc := make(chan error, 1)
	m := startMeter()
	go func() {
		r.Start(runCtx)
		close(runnerDone)
	}()
	go func() {
		errc <- publishGoqite(ctx, c, db, func(tx *sql.Tx, b []byte) error {
			_, err := jobs.CreateTx(ctx, tx, q, "bench", goqite.Message{Body: b})
			return err
		})
	}()
	// The runner deletes a message after its job returned; wait for the
	// last job, then for the table to empty (at most Concurrency deletes).
	waitErr := func() error {
		for {
			select {
			case <-ran:
				for {
					var left int64
					if err := db.QueryRowContext(ctx, `select count(*) from goqite`).Scan(&left); err != nil {
						return err
					}
					if left == 0 {
						return nil
					}
					select {
					case <-ctx.Done():
						return fmt.Errorf("timed out with %d left: %w", left, ctx.Err())
					case <-time.After(100 * time.Microsecond):
					}
				}
			case err := <-errc:
				if err != nil {
					return err
				}
			case <-ctx.Done():
				return fmt.Errorf("timed out: %w", ctx.Err())
			}
		}
	}()
	measured := Result{}
	m.stop(&measured)
	elapsed := measured.Elapsed
	stop()
	<-runnerDone
	if waitErr != nil {
		return Result{}, fmt.Errorf("goqite jobs: %w", waitErr)
	}
	tr.acked(int64(c.N))
	if err := errors.Join(tr.check(), checkGoqiteEmpty(ctx, db)); err != nil {
		return Result{}, fmt.Errorf("goqite jobs: %w", err)
	}
	return Result{
		Name: "goqite jobs runner", N: c.N, Elapsed: elapsed, CPU: measured.CPU,
		WriteBytes: measured.WriteBytes, WriteCalls: measured.WriteCalls,
		Notes: fmt.Sprintf("1 goroutine: BeginTx + %d×jobs.CreateTx + Commit; jobs.Runner Limit=%d PollInterval=%s (Receive, run, Delete: one tx each)",
			c.PublishBatch, c.Concurrency, c.GoqitePoll),
	}, nil
}
