package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"

	"github.com/lily-mq/lily/transport"
)

// Group commit across callers.
//
// Publish, the lease of Receive, Settle, ExtendLeases and Unreceive are
// writes: each is a function of one transaction. They do not open their
// own transactions; they hand the function to the transport's writer (one
// goroutine per Transport), which runs every write waiting at that moment
// in one transaction and commits once. A caller returns only after that
// commit, so each write is as durable as it was in a transaction of its
// own (WAL, synchronous FULL: when Publish returns nil the messages are on
// disk; a lease's raised receive counts are on disk before any handler
// sees the deliveries; an ack is on disk before Settle returns). What
// changes is the number of commits — and of fsyncs, WAL frames for the
// b-tree pages every transaction rewrites, and BEGIN/COMMIT round trips —
// when callers run concurrently: a publisher, a consumer's lease and its
// settlements, competing consumers on one Transport share one commit
// instead of taking turns on the connection for one each.
//
// Within a transaction the writes run one after the other, as if each had
// its own transaction in that order: settlements first, then publishes,
// then leases (all of them are concurrent, so any order is one a caller
// could have seen; this one lets a lease take what was just acknowledged
// or published). A write that fails rolls the whole transaction back, and
// then every write of the group runs again alone, in its own transaction:
// a failure never leaks into another caller's outcome. So a write's
// function must leave nothing behind but what it does in tx and must be
// able to run again from the start (it resets its results).
//
// A caller whose context ends while its write waits withdraws it; once the
// writer has taken a write, the caller waits for its outcome (a
// transaction's time), so that what was committed — a lease above all —
// is never lost to a caller that went away.

// writeKind orders the writes of one group.
type writeKind int

const (
	writeSettle  writeKind = iota // Settle, ExtendLeases, Unreceive
	writePublish                  // Publish
	writeLease                    // the lease of Receive
)

// maxGroup bounds the writes of one transaction, so that a burst of
// callers cannot make one transaction (and its callers' wait) long.
const maxGroup = 64

// write states.
const (
	writeQueued int32 = iota
	writeTaken
	writeWithdrawn
)

// write is one caller's work in a group transaction.
type write struct {
	kind writeKind
	what string          // for errors: "publish", "receive", "settle", …
	ctx  context.Context // the caller's: a write alone runs under it
	// run does the work in tx. It may run twice (alone after a failed
	// group) and must reset what it reports.
	run func(ctx context.Context, tx *sql.Tx) error
	// wakes is set by run when the commit makes messages ready for
	// Receive calls waiting in this process.
	wakes bool
	// readies is set on a write that makes count messages of queue ready
	// at once (a publish): leases parked on queue join its group, after
	// it, until their limits cover count.
	readies bool
	queue   string
	count   int // a publish: messages; a lease: its limit
	// drained is set by a lease's run when it saw every ready message of
	// its queue (fewer than its limit, none held back): the publishes of
	// its group then need wake nobody.
	drained bool

	state atomic.Int32
	done  chan error // buffered: the writer never waits for the caller
}

// write runs w in the next group transaction and returns its outcome.
func (t *Transport) write(ctx context.Context, w *write) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w.ctx, w.done = ctx, make(chan error, 1)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return fmt.Errorf("sqlite transport: %s: %w", w.what, transport.ErrClosed)
	}
	t.pending = append(t.pending, w)
	t.mu.Unlock()
	t.kickWriter()
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		if w.state.CompareAndSwap(writeQueued, writeWithdrawn) {
			return ctx.Err()
		}
		return <-w.done // taken: what it did decides
	}
}

// kickWriter tells the writer to look at the pending writes (and the
// wanted statements).
func (t *Transport) kickWriter() {
	select {
	case t.kick <- struct{}{}:
	default: // the writer has been kicked already
	}
}

// writeLoop is the transport's writer: it runs the pending writes in group
// transactions until Close.
func (t *Transport) writeLoop() {
	defer close(t.writerDone)
	var spare []*write
	for {
		select {
		case <-t.kick:
		case <-t.done:
		}
		for {
			t.mu.Lock()
			if t.closed {
				ws := t.pending
				t.pending = nil
				t.mu.Unlock()
				for _, w := range ws {
					if w.state.CompareAndSwap(writeQueued, writeTaken) {
						w.done <- fmt.Errorf("sqlite transport: %s: %w", w.what, transport.ErrClosed)
					}
				}
				return
			}
			n := min(len(t.pending), maxGroup)
			ws := append(spare[:0], t.pending[:n]...)
			t.pending = append(t.pending[:0], t.pending[n:]...)
			ws = t.joinParked(ws)
			t.mu.Unlock()
			if len(ws) == 0 {
				// Kicked by a PublishTx that parsed a shape itself
				// (statements.bind): prepare it now. A failure here
				// fails nothing; the next write that needs the shape
				// tries again and reports it.
				_ = t.st.ensure(context.Background(), t.db, nil)
				break
			}
			t.groups.Add(1)
			t.runGroup(ws)
			clear(ws) // drop the references for the collector
			spare = ws
			// Let the callers just answered (a publisher, a settler) run
			// and hand in their next write before the next group is cut.
			runtime.Gosched()
		}
	}
}

// park queues a lease w (of a Receive waiting for messages) to run in the
// transaction of the next publish into its queue, after the publish. It is
// not run otherwise: the caller withdraws it (unpark) when its wait ends.
// It returns false after Close.
func (t *Transport) park(w *write) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.parked = append(t.parked, w)
	return true
}

// unpark withdraws a parked lease. It returns false when the writer has
// taken it already: its outcome then comes on w.done.
func (t *Transport) unpark(w *write) bool {
	if !w.state.CompareAndSwap(writeQueued, writeWithdrawn) {
		return false
	}
	t.mu.Lock()
	if i := slices.Index(t.parked, w); i >= 0 {
		t.parked = slices.Delete(t.parked, i, i+1)
	}
	t.mu.Unlock()
	return true
}

// joinParked adds to the group ws leases parked on the queues its
// publishes make messages ready in, oldest first, until their limits
// cover what the publishes add (t.mu held). The others stay parked: with
// competing consumers the first lease takes a publish whole, and running
// the rest would only find nothing.
func (t *Transport) joinParked(ws []*write) []*write {
	if len(t.parked) == 0 {
		return ws
	}
	added := map[string]int{}
	for _, r := range ws {
		if r.readies {
			added[r.queue] += r.count
		}
	}
	if len(added) == 0 {
		return ws
	}
	t.parked = slices.DeleteFunc(t.parked, func(w *write) bool {
		if added[w.queue] <= 0 || w.state.Load() != writeQueued {
			return false
		}
		added[w.queue] -= w.count
		ws = append(ws, w)
		return true
	})
	return ws
}

// groupWakes tells whether the commit of live must wake the Receive calls
// waiting in this process: a write made messages ready, and not only
// publishes into queues that a lease of the group then drained.
func groupWakes(live []*write) bool {
	var drained map[string]bool
	for _, w := range live {
		if w.kind == writeLease && w.drained {
			if drained == nil {
				drained = map[string]bool{}
			}
			drained[w.queue] = true
		}
	}
	for _, w := range live {
		if w.wakes && !(w.readies && drained[w.queue]) {
			return true
		}
	}
	return false
}

// runGroup runs ws (the writes taken from the queue) in one transaction,
// or each alone when one of them fails.
func (t *Transport) runGroup(ws []*write) {
	live := ws[:0]
	for _, w := range ws {
		if w.state.CompareAndSwap(writeQueued, writeTaken) {
			live = append(live, w)
		}
	}
	switch len(live) {
	case 0:
		return
	case 1:
		t.runAlone(live[0])
		return
	}
	slices.SortStableFunc(live, func(a, b *write) int { return cmp.Compare(a.kind, b.kind) })
	// The callers' contexts do not cancel a transaction they share: a
	// caller that goes away still gets (and ignores) its outcome.
	ctx := context.Background()
	err := t.st.ensure(ctx, t.db, live)
	var tx *sql.Tx
	if err == nil {
		tx, err = t.db.BeginTx(ctx, nil)
	}
	if err != nil {
		for _, w := range live {
			w.done <- fmt.Errorf("sqlite transport: %s: %w", w.what, err)
		}
		return
	}
	for _, w := range live {
		w.wakes, w.drained = false, false
		if err := w.run(ctx, tx); err != nil {
			tx.Rollback()
			for _, w := range live {
				t.runAlone(w)
			}
			return
		}
	}
	err = tx.Commit()
	if err == nil {
		t.shared.Add(int64(len(live)))
	}
	if err == nil && groupWakes(live) {
		// Before the answers: a lease of this group that found nothing
		// parks again on the wake channel of after this commit
		// (waitParked).
		t.signal()
	}
	for _, w := range live {
		if err != nil {
			w.done <- fmt.Errorf("sqlite transport: %s commit: %w", w.what, err)
			continue
		}
		w.done <- nil
	}
}

// runAlone runs w in a transaction of its own, under its caller's
// context as before group commit, and reports its outcome.
func (t *Transport) runAlone(w *write) {
	err := t.inTx(w.ctx, w)
	if err == nil && w.wakes {
		t.signal() // before the answer, as in runGroup
	}
	w.done <- err
}

// inTx runs w in its own transaction and commits it.
func (t *Transport) inTx(ctx context.Context, w *write) error {
	if err := t.st.ensure(ctx, t.db, []*write{w}); err != nil {
		return fmt.Errorf("sqlite transport: %s: %w", w.what, err)
	}
	tx, err := t.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite transport: %s: %w", w.what, err)
	}
	defer tx.Rollback()
	w.wakes, w.drained = false, false
	if err := w.run(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite transport: %s commit: %w", w.what, err)
	}
	return nil
}
