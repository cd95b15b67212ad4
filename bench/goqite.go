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
	db, cleanup, err := openDB(ctx, c, name, goqiteSchema)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("goqite: %w", err)
	}
	// Timeout and MaxReceive as Lily's defaults (visibility 30 s, delivery
	// limit 5); goqite's own defaults are 5 s and 3.
	q := goqite.New(goqite.NewOpts{DB: db, Name: goqiteQueue, Timeout: 30 * time.Second, MaxReceive: 5})
	return db, q, cleanup, nil
}

// publishGoqite sends bodies on one goroutine, PublishBatch per
// transaction: goqite has no batch send, so each batch is one
// db.BeginTx + PublishBatch × send (goqite.Queue.SendTx or jobs.CreateTx,
// one INSERT each) + Commit.
func publishGoqite(ctx context.Context, c Config, db *sql.DB, bodies [][]byte, send func(*sql.Tx, []byte) error) error {
	for i := 0; i < len(bodies); i += c.PublishBatch {
		if err := inTx(ctx, db, func(tx *sql.Tx) error {
			for _, b := range bodies[i:min(i+c.PublishBatch, len(bodies))] {
				if err := send(tx, b); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// countGoqite counts the messages in the goqite table.
const countGoqite = `select count(*) from goqite`

// checkGoqiteEmpty fails unless the goqite table is empty.
func checkGoqiteEmpty(ctx context.Context, db *sql.DB) error {
	return checkEmpty(ctx, db, countGoqite, "messages left in the goqite table")
}

// runGoqiteReceivers runs publishGoqite (Queue.SendTx) against
// c.Concurrency goroutines that each call receive until recvCtx is done;
// the clock stops when the tracker has seen N acks. receive gets the run's
// ctx and recvCtx, which is cancelled when the clock stopped; it returns
// nil once recvCtx is done, or an error that fails the run.
func runGoqiteReceivers(ctx context.Context, c Config, name, label string,
	receive func(ctx, recvCtx context.Context, db *sql.DB, q *goqite.Queue, tr *tracker) error) (Result, error) {
	c = c.WithDefaults()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	db, q, cleanup, err := openGoqite(ctx, c, name)
	if err != nil {
		return Result{}, err
	}
	defer cleanup()

	bodies := makeBodies(c)
	tr := newTracker(c.N)
	recvCtx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, c.Concurrency+1)
	var wg sync.WaitGroup
	m := startMeter()
	for range c.Concurrency {
		wg.Go(func() {
			if err := receive(ctx, recvCtx, db, q, tr); err != nil {
				errc <- err
			}
		})
	}
	go func() {
		errc <- publishGoqite(ctx, c, db, bodies, func(tx *sql.Tx, b []byte) error {
			return q.SendTx(ctx, tx, goqite.Message{Body: b})
		})
	}()
	waitErr := tr.wait(ctx, errc)
	res := m.stop()
	stop()
	wg.Wait()
	if waitErr != nil {
		return Result{}, fmt.Errorf("%s: %w", label, waitErr)
	}
	if err := errors.Join(tr.check(), checkGoqiteEmpty(ctx, db)); err != nil {
		return Result{}, fmt.Errorf("%s: %w", label, err)
	}
	return res, nil
}

// RunGoqite measures goqite's Queue API as its README shows it: one
// goroutine sends (SendTx, PublishBatch per transaction) while Concurrency
// goroutines loop ReceiveAndWait (one message per transaction) and Delete
// (one per transaction).
func RunGoqite(ctx context.Context, c Config) (Result, error) {
	c = c.WithDefaults()
	res, err := runGoqiteReceivers(ctx, c, "goqite", "goqite", func(ctx, recvCtx context.Context, _ *sql.DB, q *goqite.Queue, tr *tracker) error {
		for {
			m, err := q.ReceiveAndWait(recvCtx, c.GoqitePoll)
			if err != nil {
				if recvCtx.Err() == nil {
					return fmt.Errorf("receive: %w", err)
				}
				return nil
			}
			tr.consumed(m.Body)
			if err := q.Delete(ctx, m.ID); err != nil {
				return fmt.Errorf("delete: %w", err)
			}
			tr.acked(1)
		}
	})
	if err != nil {
		return Result{}, err
	}
	return res.done("goqite Queue (Receive/Delete)", c.N,
		fmt.Sprintf("1 goroutine: BeginTx + %d×Queue.SendTx + Commit (no batch API); %d goroutines: Queue.ReceiveAndWait(poll %s) + Queue.Delete, one tx each",
			c.PublishBatch, c.Concurrency, c.GoqitePoll)), nil
}

// RunGoqiteBatched gives goqite its best shot, beyond its documented
// patterns: the same publisher, and Concurrency goroutines that each lease
// up to Batch messages in one transaction (Batch × Queue.ReceiveTx) and
// delete them in another (Batch × Queue.DeleteTx).
func RunGoqiteBatched(ctx context.Context, c Config) (Result, error) {
	c = c.WithDefaults()
	res, err := runGoqiteReceivers(ctx, c, "goqite-batched", "goqite batched", func(ctx, recvCtx context.Context, db *sql.DB, q *goqite.Queue, tr *tracker) error {
		ids := make([]goqite.ID, 0, c.Batch)
		for recvCtx.Err() == nil {
			ids = ids[:0]
			err := inTx(ctx, db, func(tx *sql.Tx) error {
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
				return fmt.Errorf("receive: %w", err)
			}
			if len(ids) == 0 {
				select {
				case <-recvCtx.Done():
				case <-time.After(c.GoqitePoll):
				}
				continue
			}
			if err := inTx(ctx, db, func(tx *sql.Tx) error {
				for _, id := range ids {
					if err := q.DeleteTx(ctx, tx, id); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				return fmt.Errorf("delete: %w", err)
			}
			tr.acked(int64(len(ids)))
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	return res.done("goqite, batched through its *Tx API (not a documented pattern)", c.N,
		fmt.Sprintf("publisher as above; %d goroutines: BeginTx + up to %d×Queue.ReceiveTx + Commit, BeginTx + Queue.DeleteTx each + Commit",
			c.Concurrency, c.Batch)), nil
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

	bodies := makeBodies(c)
	tr := newTracker(c.N)
	r := jobs.NewRunner(jobs.NewRunnerOpts{Limit: c.Concurrency, PollInterval: c.GoqitePoll, Queue: q})
	// A job counts as acked when it ran (tr.done closes at N); the runner
	// deletes its message after.
	r.Register("bench", func(_ context.Context, m []byte) error {
		tr.consumed(m)
		tr.acked(1)
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
		errc <- publishGoqite(ctx, c, db, bodies, func(tx *sql.Tx, b []byte) error {
			_, err := jobs.CreateTx(ctx, tx, q, "bench", goqite.Message{Body: b})
			return err
		})
	}()
	// Wait for the last job, then for the table to empty (at most
	// Concurrency deletes).
	waitErr := tr.wait(ctx, errc)
	for waitErr == nil {
		var left int64
		if waitErr = db.QueryRowContext(ctx, countGoqite).Scan(&left); waitErr != nil || left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			waitErr = fmt.Errorf("timed out with %d left: %w", left, ctx.Err())
		case <-time.After(100 * time.Microsecond):
		}
	}
	res := m.stop()
	stop()
	<-runnerDone
	if waitErr != nil {
		return Result{}, fmt.Errorf("goqite jobs: %w", waitErr)
	}
	if err := errors.Join(tr.check(), checkGoqiteEmpty(ctx, db)); err != nil {
		return Result{}, fmt.Errorf("goqite jobs: %w", err)
	}
	return res.done("goqite jobs runner", c.N,
		fmt.Sprintf("1 goroutine: BeginTx + %d×jobs.CreateTx + Commit; jobs.Runner Limit=%d PollInterval=%s (Receive, run, Delete: one tx each)",
			c.PublishBatch, c.Concurrency, c.GoqitePoll)), nil
}
