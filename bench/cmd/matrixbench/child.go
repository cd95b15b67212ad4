package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/bench/internal/kfakeserve"
)

// child runs the role s names; it returns the exit code.
func child(s spec) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// From here SIGTERM stops this process cleanly: the parent signals
	// none before it reads this line.
	fmt.Println("up")
	var err error
	switch s.Role {
	case roleConsumer:
		err = consume(ctx, s)
	case roleCeiling:
		err = writeCeiling(ctx, s)
	case roleKafka:
		err = kfakeserve.Serve(ctx, s.KafkaPort, func(addr string) { fmt.Println("listening", addr) })
	default:
		err = fmt.Errorf("%s: unknown role %q", specEnv, s.Role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "matrixbench %s %d: %v\n", s.Role, os.Getpid(), err)
		return 1
	}
	return 0
}

// progress reports a child's counts to the parent on standard output, one
// line "acked A other O" whenever they changed (checked every few
// milliseconds, so that the parent's clock stops within that of the
// last ack), and once more when it stops.
type progress struct {
	acked, other atomic.Int64
	done         chan struct{}
	stopped      chan struct{}
}

func startProgress() *progress {
	p := &progress{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(p.stopped)
		var last [2]int64
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				p.report(&last, true)
				return
			case <-t.C:
				p.report(&last, false)
			}
		}
	}()
	return p
}

func (p *progress) report(last *[2]int64, always bool) {
	now := [2]int64{p.acked.Load(), p.other.Load()}
	if now != *last || always {
		fmt.Printf("acked %d other %d\n", now[0], now[1])
		*last = now
	}
}

// stop sends the final counts and waits until they are written.
func (p *progress) stop() {
	close(p.done)
	<-p.stopped
}

// consume is one consumer process of a Lily cell: a lily.Consumer over
// the cell's backend (ledger.Account of the transport and the catalog, or
// the transport alone) with a handler that succeeds, until SIGTERM. It
// then writes the event IDs it acked, one a line, to s.IDs: the parent's
// check that every message was acked exactly once across processes.
func consume(ctx context.Context, s spec) error {
	// Opening is not cut short by SIGTERM: a process stopped before it
	// consumed anything (its peers were quicker) opens, runs no longer
	// and exits cleanly.
	b, err := openBackend(context.Background(), s)
	if err != nil {
		return err
	}
	defer b.close()
	p := startProgress()
	var mu sync.Mutex
	var ids []string
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		switch e.Kind {
		case lily.EventAcked:
			mu.Lock()
			ids = append(ids, e.EventID)
			mu.Unlock()
			p.acked.Add(1)
		case lily.EventRetried, lily.EventDeadLettered, lily.EventReleased, lily.EventSettleFailed,
			lily.EventFault, lily.EventHeld, lily.EventParked:
			p.other.Add(1) // none expected: the handler always succeeds
		}
	})
	h := lily.HandlerFunc(func(context.Context, *lily.Delivery) error { return nil })
	c, err := lily.NewConsumer(b.tr, h, lily.ConsumerOptions{Queue: queueConfig(s), Concurrency: concurrency, Prefetch: prefetch,
		Hooks: []lily.Hook{hook}, Logger: quiet, Name: fmt.Sprintf("matrixbench-%d", s.Index)})
	if err != nil {
		return err
	}
	runErr := c.Run(ctx)
	p.stop()
	mu.Lock()
	defer mu.Unlock()
	if err := os.WriteFile(s.IDs, []byte(strings.Join(ids, "\n")), 0o644); err != nil {
		return fmt.Errorf("write the acked event IDs: %w", err)
	}
	return runErr
}

// The consumer processes' settings, fleetbench's: 32 handlers, 256
// deliveries held at most (and so at most 256 settlements in a batch).
const (
	concurrency = 32
	prefetch    = 256
)
