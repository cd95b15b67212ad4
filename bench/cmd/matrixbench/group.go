package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/lily-mq/lily/bench/internal/fleet"
)

// group is the child processes of one cell and what they reported.
type group struct {
	cmds    []*exec.Cmd
	mu      sync.Mutex
	acked   []int64
	other   []int64
	changed chan struct{}   // a report arrived (capacity 1: a wake-up, not a count)
	up      []chan struct{} // closed when child i handles SIGTERM (or exited)
	exited  chan error      // one value per child when it exits
	stopped bool
}

// startGroup starts one child per spec; each reports "acked A other O"
// lines on its standard output (progress).
func startGroup(specs []spec) (*group, error) {
	g := &group{acked: make([]int64, len(specs)), other: make([]int64, len(specs)),
		changed: make(chan struct{}, 1), exited: make(chan error, len(specs))}
	for i, s := range specs {
		cmd, err := fleet.Start(s.env())
		if err != nil {
			g.stop()
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			g.stop()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			g.stop()
			return nil, fmt.Errorf("start %s process %d: %w", s.Role, i, err)
		}
		g.cmds = append(g.cmds, cmd)
		up := make(chan struct{})
		g.up = append(g.up, up)
		go func() {
			defer closeOnce(up)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if sc.Text() == "up" {
					closeOnce(up)
					continue
				}
				var a, o int64
				if _, err := fmt.Sscanf(sc.Text(), "acked %d other %d", &a, &o); err != nil {
					continue
				}
				g.mu.Lock()
				g.acked[i], g.other[i] = a, o
				g.mu.Unlock()
				select {
				case g.changed <- struct{}{}:
				default:
				}
			}
			err := cmd.Wait()
			if err != nil {
				err = fmt.Errorf("%s process %d (pid %d): %w", s.Role, i, cmd.Process.Pid, err)
			}
			g.exited <- err
		}()
	}
	return g, nil
}

// totals sums what the children reported.
func (g *group) totals() (acked, other int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.acked {
		acked += g.acked[i]
		other += g.other[i]
	}
	return acked, other
}

// wait returns once the children together acked n, or fails when one
// exits first or timeout passes.
func (g *group) wait(ctx context.Context, n int64, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		if acked, _ := g.totals(); acked >= n {
			return nil
		}
		select {
		case <-g.changed:
		case err := <-g.exited:
			g.exited <- err // stop counts it again
			acked, _ := g.totals()
			return fmt.Errorf("a child process exited after %d of %d acks: %v", acked, n, err)
		case <-deadline.C:
			acked, _ := g.totals()
			return fmt.Errorf("%d of %d acked after %s", acked, n, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stop sends SIGTERM to every child and waits for all to exit (killing
// those still running after a minute); it returns their errors.
func (g *group) stop() error {
	if g.stopped {
		return nil
	}
	g.stopped = true
	for i, c := range g.cmds {
		select {
		case <-g.up[i]:
		case <-time.After(time.Minute):
		}
		c.Process.Signal(syscall.SIGTERM)
	}
	var errs []error
	kill := time.After(time.Minute)
	for range g.cmds {
		select {
		case err := <-g.exited:
			errs = append(errs, err)
		case <-kill:
			for _, c := range g.cmds {
				c.Process.Kill()
			}
			errs = append(errs, <-g.exited, errors.New("a child did not stop within a minute of SIGTERM: killed"))
		}
	}
	return errors.Join(errs...)
}

// closeOnce closes c unless it is closed already (only its own goroutine
// closes it).
func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}
