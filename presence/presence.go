// Package presence keeps the heartbeats of consumer instances in the
// catalog and brings them the pauses of their queues (docs/design.md
// §9.10): Beat is the transport.Presence that the runtime reports to and
// asks before every fetch. One loop per process writes one small upsert
// per instance every Options.Every and reads the paused queues with it, so
// the message path never waits for the catalog, and a pause is obeyed
// within one interval plus one receive wait.
package presence

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/transport"
)

// Defaults of Options.
const (
	DefaultEvery      = 5 * time.Second
	DefaultPruneAfter = 24 * time.Hour
)

// pruneEveryBeats is how many beats pass between prunes of long-dead
// instances: pruning is for bounding the table, not for accuracy.
const pruneEveryBeats = 60

// Options tune a Beat; the zero value is the defaults.
type Options struct {
	// Every is the heartbeat interval: how often each instance's row is
	// written and the paused queues are read. Defaults to 5s.
	Every time.Duration
	// PruneAfter is how long a stale instance (a process that died
	// without stopping) stays listed before its row is deleted. Defaults
	// to 24h.
	PruneAfter time.Duration
	// Host and PID are written in the rows. Default to this process's.
	Host string
	PID  int
	// Now is the clock of the rows. Defaults to time.Now.
	Now func() time.Time
	// Log receives heartbeat failures. Defaults to slog.Default().
	Log *slog.Logger
}

// Beat writes the heartbeats of the consumer instances of one process and
// reads the pauses they obey. It is safe for concurrent use.
type Beat struct {
	store *catalog.Store
	o     Options

	// beating serializes beats, so that a row is never overwritten by an
	// older snapshot of its instance.
	beating sync.Mutex

	mu      sync.Mutex
	inst    map[string]*catalog.Consumer
	paused  map[string]bool
	changed chan struct{} // closed (and replaced) when paused may have changed
	loaded  bool          // paused was read at least once
	running bool
	closed  bool

	poke chan struct{}
	stop chan struct{}
	done chan struct{} // closed when the running loop ends; one per run
}

var _ transport.Presence = (*Beat)(nil)

// New returns a Beat on store with options o. Its loop starts with the
// first instance reported; Close stops it.
func New(store *catalog.Store, o Options) *Beat {
	if o.Every <= 0 {
		o.Every = DefaultEvery
	}
	if o.PruneAfter <= 0 {
		o.PruneAfter = DefaultPruneAfter
	}
	if o.Host == "" {
		o.Host, _ = os.Hostname()
	}
	if o.PID == 0 {
		o.PID = os.Getpid()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Beat{store: store, o: o, inst: map[string]*catalog.Consumer{}, paused: map[string]bool{},
		changed: make(chan struct{}), poke: make(chan struct{}, 1), stop: make(chan struct{})}
}

// ReportConsumer records s. A new instance is written at once, with the
// paused queues read first, so that a consumer started on a paused queue
// takes nothing; later changes are written by the loop right away (a
// poke), a stop deletes the instance's row.
func (b *Beat) ReportConsumer(ctx context.Context, s transport.ConsumerState) {
	now := b.o.Now()
	b.mu.Lock()
	if s.Stopped {
		delete(b.inst, s.Instance)
		b.mu.Unlock()
		if err := b.store.RemoveConsumer(ctx, s.Instance); err != nil {
			b.o.Log.Warn("removing a stopped consumer's heartbeat failed; it shows stale until pruned", "instance", s.Instance, "err", err)
		}
		return
	}
	c, known := b.inst[s.Instance]
	if !known {
		c = &catalog.Consumer{Instance: s.Instance, Host: b.o.Host, PID: b.o.PID,
			HeartbeatMillis: b.o.Every.Milliseconds(), StartedAt: now}
		b.inst[s.Instance] = c
	}
	c.Queue, c.Name, c.Version, c.Breaker, c.Paused = s.Queue, s.Name, s.Version, s.Breaker, s.Paused
	start := !b.running && !b.closed
	var done chan struct{}
	if start {
		b.running, done = true, make(chan struct{})
		b.done = done
	}
	b.mu.Unlock()
	if start {
		go b.loop(done)
	}
	if known {
		select {
		case b.poke <- struct{}{}:
		default: // a beat is due already
		}
		return
	}
	b.beat(ctx)
}

// QueuePaused reports whether queue is paused as last read, and a channel
// closed when the pauses read next differ.
func (b *Beat) QueuePaused(queue string) (bool, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.paused[queue], b.changed
}

// Close stops the loop and waits for it. The rows of instances still
// running stay (they show stale if the process does not stop them).
func (b *Beat) Close() error {
	b.mu.Lock()
	running, done := b.running, b.done
	if !b.closed {
		b.closed = true
		close(b.stop)
	}
	b.mu.Unlock()
	if running {
		<-done
	}
	return nil
}

// loop beats every interval, and at once when poked, while an instance is
// reported; it ends with the last instance's stop (the next report starts
// it again), so that a process whose consumers stopped does not read a
// catalog it may have closed.
func (b *Beat) loop(done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-b.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTicker(b.o.Every)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-b.stop:
			return
		case <-t.C:
		case <-b.poke:
		}
		if b.idle() {
			return
		}
		b.beat(ctx)
		if n%pruneEveryBeats == 0 {
			if _, err := b.store.PruneConsumers(ctx, b.o.Now().Add(-b.o.PruneAfter)); err != nil && ctx.Err() == nil {
				b.o.Log.Warn("pruning dead consumers' heartbeats failed", "err", err)
			}
		}
	}
}

// idle ends the loop's run when no instance is left.
func (b *Beat) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.inst) > 0 {
		return false
	}
	b.running = false
	return true
}

// beat reads the paused queues, tells the consumers when they changed,
// then writes every instance's row. A catalog that cannot be read keeps
// the pauses as last read: a pause holds through an outage of the
// catalog, and a resume takes effect once it is back.
func (b *Beat) beat(ctx context.Context) {
	b.beating.Lock()
	defer b.beating.Unlock()
	ps, err := b.store.Pauses(ctx)
	if err != nil {
		if ctx.Err() == nil {
			b.o.Log.Warn("reading paused queues failed; the pauses stay as last read", "err", err)
		}
	} else {
		b.setPaused(ps)
	}
	now := b.o.Now()
	b.mu.Lock()
	rows := make([]catalog.Consumer, 0, len(b.inst))
	for _, c := range b.inst {
		c.LastSeen = now
		rows = append(rows, *c)
	}
	b.mu.Unlock()
	for i := range rows {
		if err := b.store.Heartbeat(ctx, &rows[i]); err != nil && ctx.Err() == nil {
			b.o.Log.Warn("writing a consumer heartbeat failed; it shows stale until one succeeds", "instance", rows[i].Instance, "err", err)
		}
	}
}

// setPaused replaces the paused queues, waking the consumers if any
// queue's pause changed.
func (b *Beat) setPaused(ps []catalog.Pause) {
	next := make(map[string]bool, len(ps))
	for _, p := range ps {
		next[p.Queue] = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	same := b.loaded && len(next) == len(b.paused)
	for q := range next {
		same = same && b.paused[q]
	}
	b.paused, b.loaded = next, true
	if !same {
		close(b.changed)
		b.changed = make(chan struct{})
	}
}
