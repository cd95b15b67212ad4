package transporttest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/transport"
)

// CrashMemberEnv names the environment variable RunCrashFleet sets for
// each child: its member number (0, 1, ...), the same for the runs that
// replace it when it dies — a stable identity, as a pod of a stateful set
// keeps its name.
const CrashMemberEnv = "LILY_CRASH_MEMBER"

// crashFleetTimeout bounds a crash fleet's run: children that never drain
// their queue are killed and the test fails, instead of hanging until the
// package's timeout.
const crashFleetTimeout = 4 * time.Minute

// CrashExitCode is the exit code of a crash-test child process that dies on
// its poison message (os.Exit in the handler, so that no recover sees it).
const CrashExitCode = 7

// RunCrashChildren runs the test binary as a child process with no tests
// (-test.run=^$) and env added to its environment — the child's TestMain
// recognises its role from env — again and again until a run ends
// normally, and returns how many runs died with CrashExitCode. It fails the
// test when a child fails any other way, or dies more than 10 times (the
// poison is then not bounded by the delivery limit).
func RunCrashChildren(t *testing.T, env ...string) (restarts int) {
	t.Helper()
	return RunCrashChildrenDrained(t, nil, env...)
}

// RunCrashChildrenDrained is RunCrashChildren where the child's idle check
// cannot see what its dead predecessor held (RunCrashFleetDrained says
// why): when a run ends normally, left counts what the queue still holds,
// and while that is not zero a child runs again (at most 5 times).
func RunCrashChildrenDrained(t *testing.T, left func() (int64, error), env ...string) (restarts int) {
	t.Helper()
	again := 0
	for {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), env...)
		cmd.Stderr = os.Stderr
		err := cmd.Run()
		if err == nil && left != nil {
			n, lerr := left()
			switch {
			case lerr != nil:
				t.Fatalf("the consumer ended; counting what the queue still holds: %v", lerr)
			case n > 0 && again == 5:
				t.Fatalf("the consumer ended %d times with the queue holding %d", again+1, n)
			case n > 0:
				again++
				t.Logf("the consumer ended with %d messages still in the queue (its dead predecessor's window came back after it looked): it runs again", n)
				continue
			}
		}
		if err == nil {
			return restarts
		}
		if cmd.ProcessState.ExitCode() != CrashExitCode {
			t.Fatalf("consumer process failed (not the poison's exit): %v", err)
		}
		restarts++
		if restarts > 10 {
			t.Fatalf("consumer died %d times: the poison is not bounded by the delivery limit", restarts)
		}
	}
}

// RunCrashFleet runs members copies of the crash-test child at once (as
// RunCrashChildren runs one), each restarted whenever it dies with
// CrashExitCode, until every one has ended normally, and returns how many
// runs died in all. Competing consumers of one queue: a death raises the
// delivery counts of what that member held, and the others must carry on.
// It fails the test when a child fails any other way, or when the members
// died more than 10 times in all.
func RunCrashFleet(t *testing.T, members int, env ...string) (restarts int) {
	t.Helper()
	return RunCrashFleetDrained(t, members, nil, env...)
}

// RunCrashFleetDrained is RunCrashFleet where a member's idle check cannot
// see what a dead member held: on RabbitMQ a killed consumer's window goes
// back to the queue only once the broker has processed its death, and a
// member that looks in between sees an empty queue and ends. Once every
// member has ended normally, left — an exact count now that no consumer
// is left to hold anything — says what is still in the queue; while it is
// not zero, member 0 is started again to take it (at most 5 times).
func RunCrashFleetDrained(t *testing.T, members int, left func() (int64, error), env ...string) (restarts int) {
	t.Helper()
	type exit struct {
		member int
		err    error
		code   int
	}
	exits := make(chan exit, members)
	var mu sync.Mutex
	procs := make([]*os.Process, members)
	start := func(m int) error {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(append(os.Environ(), env...), fmt.Sprintf("%s=%d", CrashMemberEnv, m))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		mu.Lock()
		procs[m] = cmd.Process
		mu.Unlock()
		go func() {
			err := cmd.Wait()
			exits <- exit{member: m, err: err, code: cmd.ProcessState.ExitCode()}
		}()
		return nil
	}
	var failed error
	fail := func(err error) {
		if failed != nil {
			return
		}
		failed = err
		mu.Lock()
		defer mu.Unlock()
		for _, p := range procs {
			if p != nil {
				p.Kill() // the others would wait for a queue that never drains
			}
		}
	}
	running := 0
	for m := range members {
		if err := start(m); err != nil {
			fail(fmt.Errorf("start consumer process %d: %w", m, err))
			break
		}
		running++
	}
	timeout := time.NewTimer(crashFleetTimeout)
	defer timeout.Stop()
	again := 0
	for running > 0 {
		var e exit
		select {
		case e = <-exits:
		case <-timeout.C:
			fail(fmt.Errorf("the members did not drain the queue within %s (their stderr says what stayed in flight); killed", crashFleetTimeout))
			continue
		}
		running--
		switch {
		case failed != nil || e.err == nil:
		case e.code != CrashExitCode:
			fail(fmt.Errorf("consumer process %d failed (not the poison's exit): %w", e.member, e.err))
		case restarts >= 10:
			restarts++
			fail(fmt.Errorf("consumers died %d times: the poison is not bounded by the delivery limit", restarts))
		default:
			restarts++
			if err := start(e.member); err != nil {
				fail(fmt.Errorf("restart consumer process %d: %w", e.member, err))
				continue
			}
			running++
		}
		if running > 0 || failed != nil || left == nil {
			continue
		}
		n, err := left()
		switch {
		case err != nil:
			fail(fmt.Errorf("every member ended; counting what the queue still holds: %w", err))
		case n > 0 && again == 5:
			fail(fmt.Errorf("every member ended, %d times one more, and the queue still holds %d", again+1, n))
		case n > 0:
			again++
			t.Logf("every member ended with %d messages still in the queue (a dead member's window came back after the others looked): member 0 starts again", n)
			if err := start(0); err != nil {
				fail(fmt.Errorf("start consumer process 0 again: %w", err))
				continue
			}
			running++
		}
	}
	if failed != nil {
		t.Fatal(failed)
	}
	return restarts
}

// WantProcessedAllBut checks the log a crash-test child writes (one event
// ID per processed message, see ReadIDs) against the published msgs: every
// message but msgs[poison] was processed, the poison never, and nothing
// else — none lost, none invented.
func WantProcessedAllBut(t *testing.T, logPath string, msgs []lily.Message, poison int) {
	t.Helper()
	processed := ReadIDs(t, logPath)
	for i, m := range msgs {
		if i != poison && !processed[m.EventID] {
			t.Errorf("message %d (%s, key %q) was not processed", i, m.Body, m.Key)
		}
	}
	if processed[msgs[poison].EventID] || len(processed) != len(msgs)-1 {
		t.Errorf("processed %d distinct messages (the poison: %v), want %d: all but the poison", len(processed), processed[msgs[poison].EventID], len(msgs)-1)
	}
}

// ReadIDs returns the distinct whitespace-separated words (event IDs) of
// the file at path, as a crash-test child logs what it processed.
func ReadIDs(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, id := range strings.Fields(string(data)) {
		ids[id] = true
	}
	return ids
}

// CancelWhenIdle polls c every interval until queue has nothing in flight
// (or ctx ends), then calls cancel. A crash-test child runs it in a
// goroutine to end its consumer once the queue is drained.
//
// A queue that does not drain within a minute is reported on stderr
// (what is still in flight) every 30 seconds, so that a run that never
// ends says why.
func CancelWhenIdle(ctx context.Context, c transport.InFlightCounter, queue string, every time.Duration, cancel func()) {
	// The first look comes one interval after the start, as it always
	// did: the deliveries of a predecessor that just died may still be on
	// their way back to the queue, where no count sees them.
	select {
	case <-ctx.Done():
		return
	case <-time.After(every):
	}
	start := time.Now()
	report := start.Add(time.Minute)
	idle, _ := waittest.Poller{Every: every}.Poll(ctx, func() (bool, string) {
		n, err := c.InFlight(ctx, queue)
		if err == nil && n == 0 {
			return true, ""
		}
		if now := time.Now(); now.After(report) {
			fmt.Fprintf(os.Stderr, "crash child %d: queue %s not drained after %s: %d in flight (%v)\n",
				os.Getpid(), queue, now.Sub(start).Round(time.Second), n, err)
			report = now.Add(30 * time.Second)
		}
		return false, ""
	})
	if idle {
		cancel()
	}
}

// RunUntil runs c until done holds (polled every 10ms) or timeout passes,
// and fails the test if Run returns an error. It does not fail on the
// timeout: the caller's checks say what did not happen.
func RunUntil(t *testing.T, c *lily.Consumer, timeout time.Duration, done func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() {
		Poll(ctx, func() (bool, string) { return done(), "" })
		cancel()
	}()
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
}
