package transporttest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/transport"
)

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
	for {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), env...)
		cmd.Stderr = os.Stderr
		err := cmd.Run()
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
func CancelWhenIdle(ctx context.Context, c transport.InFlightCounter, queue string, every time.Duration, cancel func()) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if n, err := c.InFlight(ctx, queue); err == nil && n == 0 {
			cancel()
			return
		}
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
		for !done() && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
}
