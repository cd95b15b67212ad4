package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/bench/internal/idcount"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

const lilyQueue = "bench.messages"

// openLily opens a fresh Lily SQLite transport with the queue declared.
func openLily(ctx context.Context, c Config, name string) (*sqlite.Transport, func(), error) {
	path, cleanup, err := tempDB(c, name)
	if err != nil {
		return nil, nil, err
	}
	t, err := openLilyAt(ctx, c, path)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return t, func() { t.Close(); cleanup() }, nil
}

// openLilyAt opens Lily's SQLite transport on the database file path
// (synchronous FULL, checked) and declares the queue.
func openLilyAt(ctx context.Context, c Config, path string) (*sqlite.Transport, error) {
	t, err := sqlite.Open(ctx, path, sqlite.Options{Synchronous: "FULL"})
	if err != nil {
		return nil, err
	}
	if c.TempStoreMemory {
		// The transport keeps one connection open for its lifetime, so a
		// pragma set on it holds for the run.
		if _, err := t.DB().ExecContext(ctx, `PRAGMA temp_store = MEMORY`); err != nil {
			t.Close()
			return nil, err
		}
	}
	if err := checkPragmas(ctx, t.DB()); err != nil {
		t.Close()
		return nil, err
	}
	if err := t.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{{Name: lilyQueue, DeliveryLimit: 5}}}); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// checkLilyEmpty verifies the transport's side of conservation: nothing
// left in the queue, the ledger balanced at n accepted and n acked, no
// dead letters.
func checkLilyEmpty(ctx context.Context, t *sqlite.Transport, n int) error {
	left, err := t.InFlight(ctx, lilyQueue)
	if err != nil {
		return err
	}
	if left != 0 {
		return fmt.Errorf("conservation: %d messages left in the queue", left)
	}
	var accepted, acked int64
	if err := t.DB().QueryRowContext(ctx, `SELECT accepted, acked FROM lily_ledger WHERE queue = ?`, lilyQueue).Scan(&accepted, &acked); err != nil {
		return fmt.Errorf("conservation: read ledger: %w", err)
	}
	if accepted != int64(n) || acked != int64(n) {
		return fmt.Errorf("conservation: ledger accepted=%d acked=%d, want %d and %d", accepted, acked, n, n)
	}
	var dead int64
	if err := t.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM lily_dlq_entries`).Scan(&dead); err != nil {
		return fmt.Errorf("conservation: count dead letters: %w", err)
	}
	if dead != 0 {
		return fmt.Errorf("conservation: %d dead letters", dead)
	}
	return nil
}

// RunLilyRuntime measures the full runtime: one goroutine calls
// lily.Publish with PublishBatch messages per call while a lily.Consumer
// (handler returns nil) consumes concurrently; the clock stops when a Hook
// has seen N EventAcked.
func RunLilyRuntime(ctx context.Context, c Config) (Result, error) {
	c = c.WithDefaults()
	res, err := runLilyConsumers(ctx, c, "runtime", 1, false)
	if err != nil {
		return Result{}, fmt.Errorf("lily runtime: %w", err)
	}
	return res.done("Lily SQLite, full runtime", c.N,
		fmt.Sprintf("lily.Publish %d/call on 1 goroutine, concurrently lily.Consumer Concurrency=%d Prefetch=%d SettleBatch=%d, handler returns nil",
			c.PublishBatch, c.Concurrency, c.Prefetch, c.SettleBatch)), nil
}

// RunLilyCompeting is RunLilyRuntime with Consumers competing consumers:
// separate lily.NewConsumer instances, each with the same options (and
// so each with its own Concurrency, Prefetch and settle loop), on one
// sqlite.Transport (one *sql.DB, one connection) and one queue — what a
// user who scales out inside one process does. Besides the usual
// conservation checks it counts the handler calls and the event IDs
// handled more than once (Result.Handled, Result.Duplicates); a duplicate
// fails the run.
func RunLilyCompeting(ctx context.Context, c Config) (Result, error) {
	c = c.WithDefaults()
	res, err := runLilyConsumers(ctx, c, "competing", c.Consumers, false)
	if err != nil {
		return Result{}, fmt.Errorf("lily competing: %w", err)
	}
	return res.done(fmt.Sprintf("Lily SQLite, %d competing consumers", c.Consumers), c.N,
		fmt.Sprintf("lily.Publish %d/call on 1 goroutine, concurrently %d lily.Consumer instances on one sqlite.Transport and one queue, each Concurrency=%d Prefetch=%d SettleBatch=%d, handler returns nil; handler calls %d, event IDs handled more than once %d",
			c.PublishBatch, c.Consumers, c.Concurrency, c.Prefetch, c.SettleBatch, res.Handled, res.Duplicates)), nil
}

// RunLilyCompetingFiles is RunLilyCompeting with one sqlite.Transport per
// consumer, all on the same database file (each its own *sql.DB and
// connection), as separate processes would share it: the publisher uses
// the first transport; the others learn of new messages by polling
// (sqlite.Options.PollInterval, 25 ms) and wait for SQLite's write lock
// (busy_timeout 10 s). An experiment beside the one-transport run.
func RunLilyCompetingFiles(ctx context.Context, c Config) (Result, error) {
	c = c.WithDefaults()
	res, err := runLilyConsumers(ctx, c, "competing-files", c.Consumers, true)
	if err != nil {
		return Result{}, fmt.Errorf("lily competing, one transport each: %w", err)
	}
	return res.done(fmt.Sprintf("Lily SQLite, %d competing consumers, one transport each on one file", c.Consumers), c.N,
		fmt.Sprintf("lily.Publish %d/call on 1 goroutine (transport 1), concurrently %d lily.Consumer instances, each on its own sqlite.Transport of the same file, each Concurrency=%d Prefetch=%d SettleBatch=%d, handler returns nil; handler calls %d, event IDs handled more than once %d",
			c.PublishBatch, c.Consumers, c.Concurrency, c.Prefetch, c.SettleBatch, res.Handled, res.Duplicates)), nil
}

// runLilyConsumers runs the runtime measurement with consumers
// lily.Consumer instances on one transport, or with perConsumer on one
// transport each (the first also publishes), all on one database file.
// With one consumer it is the lily-runtime run as it always was (no
// event-ID counting on the clock).
func runLilyConsumers(ctx context.Context, c Config, name string, consumers int, perConsumer bool) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	path, cleanup, err := tempDB(c, name)
	if err != nil {
		return Result{}, err
	}
	defer cleanup()
	transports := 1
	if perConsumer {
		transports = consumers
	}
	ts := make([]*sqlite.Transport, 0, transports)
	defer func() {
		for _, t := range ts {
			t.Close()
		}
	}()
	for range transports {
		t, err := openLilyAt(ctx, c, path)
		if err != nil {
			return Result{}, err
		}
		ts = append(ts, t)
	}
	t := ts[0]

	tt, traced := withTrace(c, t)
	tr := newTracker(c.N)
	var ids *idcount.Counter
	if consumers > 1 {
		ids = idcount.New(c.N)
	}
	var other atomic.Int64
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		if e.Kind == lily.EventAcked {
			tr.acked(1)
		} else {
			other.Add(1)
		}
	})
	handler := lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		tr.consumed(d.Body)
		if ids != nil {
			ids.Handled(d.EventID)
		}
		if c.Headers && len(d.Headers) != 4 {
			tr.bad.Add(1)
		}
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, consumers)
	for i := range consumers {
		cname := "lilybench"
		if consumers > 1 {
			cname = fmt.Sprintf("lilybench-%d", i+1)
		}
		ct := tt
		if perConsumer && i > 0 {
			ct = ts[i]
		}
		cons, err := lily.NewConsumer(ct, handler, lily.ConsumerOptions{
			Queue:       lily.QueueConfig{Name: lilyQueue},
			Concurrency: c.Concurrency,
			Prefetch:    c.Prefetch,
			SettleBatch: c.SettleBatch,
			ReceiveWait: time.Second,
			Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
			Hooks:       []lily.Hook{hook},
			Name:        cname,
		})
		if err != nil {
			stop()
			for range i {
				<-runErr
			}
			return Result{}, err
		}
		go func() { runErr <- cons.Run(runCtx) }()
	}

	msgs := make([]lily.Message, c.N)
	for i := range msgs {
		msgs[i] = lily.Message{Type: "bench", Body: makeBody(i, c.BodySize)}
		if c.Headers {
			msgs[i].Headers = sampleHeaders(i)
		}
	}
	pubErr := make(chan error, 1)
	m := startMeter()
	go func() {
		for i := 0; i < c.N; i += c.PublishBatch {
			if err := lily.Publish(ctx, tt, lilyQueue, msgs[i:min(i+c.PublishBatch, c.N)]); err != nil {
				pubErr <- err
				return
			}
		}
		pubErr <- nil
	}()
	waitErr := tr.wait(ctx, pubErr)
	res := m.stop()
	stop()
	for range consumers {
		if err := <-runErr; err != nil && waitErr == nil {
			waitErr = err
		}
	}
	if waitErr != nil {
		return Result{}, waitErr
	}
	traced.report(c.Trace, res.Elapsed)
	if ids != nil {
		res.Handled, res.Duplicates = ids.Calls(), ids.Duplicates()
	}
	var dupErr error
	if res.Duplicates != 0 || (ids != nil && res.Handled != int64(c.N)) {
		dupErr = fmt.Errorf("conservation: %d handler calls for %d messages published, %d event IDs handled more than once (want %d and 0)", res.Handled, c.N, res.Duplicates, c.N)
	}
	if n := other.Load(); n != 0 {
		return Result{}, errors.Join(dupErr, fmt.Errorf("conservation: %d events other than acked", n))
	}
	if err := errors.Join(dupErr, tr.check(), checkLilyEmpty(context.WithoutCancel(ctx), t, c.N)); err != nil {
		return Result{}, err
	}
	return res, nil
}

// RunLilyRaw measures the transport without the runtime, on one goroutine:
// Publish Batch messages (one call), Receive up to Batch, Settle them all
// as Ack in one call; repeat until N.
func RunLilyRaw(ctx context.Context, c Config) (Result, error) {
	c = c.WithDefaults()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	st, cleanup, err := openLily(ctx, c, "raw")
	if err != nil {
		return Result{}, err
	}
	defer cleanup()
	t, traced := withTrace(c, st)

	tr := newTracker(c.N)
	msgs := make([]transport.Message, c.N)
	bodies := makeBodies(c)
	headers := make([]transport.Headers, c.N)
	if c.Headers {
		for i := range headers {
			headers[i] = sampleHeaders(i)
		}
	}
	ss := make([]transport.Settlement, 0, c.Batch)
	m := startMeter()
	for i := 0; i < c.N; i += c.Batch {
		batch := msgs[i:min(i+c.Batch, c.N)]
		for j := range batch {
			batch[j] = transport.Message{EventID: lily.NewEventID(), Type: "bench", Body: bodies[i+j], Headers: headers[i+j]}
		}
		if err := t.Publish(ctx, &transport.PublishParams{Queue: lilyQueue, Messages: batch}); err != nil {
			return Result{}, fmt.Errorf("lily raw: publish: %w", err)
		}
		for got := 0; got < len(batch); {
			ds, err := t.Receive(ctx, &transport.ReceiveParams{Queue: lilyQueue, Max: c.Batch, Wait: time.Second, Consumer: "lilybench-raw"})
			if err != nil {
				return Result{}, fmt.Errorf("lily raw: receive: %w", err)
			}
			if len(ds) == 0 {
				return Result{}, fmt.Errorf("lily raw: receive: nothing after 1s with %d of %d of the batch received", got, len(batch))
			}
			ss = ss[:0]
			for _, d := range ds {
				tr.consumed(d.Body)
				if c.Headers && len(d.Headers) != 4 {
					tr.bad.Add(1)
				}
				ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
			}
			if err := t.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
				return Result{}, fmt.Errorf("lily raw: settle: %w", err)
			}
			tr.acked(int64(len(ds)))
			got += len(ds)
		}
	}
	res := m.stop()
	traced.report(c.Trace, res.Elapsed)
	if err := errors.Join(tr.check(), checkLilyEmpty(ctx, st, c.N)); err != nil {
		return Result{}, fmt.Errorf("lily raw: %w", err)
	}
	return res.done("Lily SQLite transport, raw", c.N,
		fmt.Sprintf("1 goroutine: Publish %d, Receive(Max=%d), Settle %d acks, repeated", c.Batch, c.Batch, c.Batch)), nil
}
