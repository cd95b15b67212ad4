package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/lily-mq/lily/transport/transporttest"

	"github.com/lily-mq/lily/internal/testparallel"
)

// childEnv marks a test binary started as a lily child process (the demo's
// worker): os.Executable() is the test binary, so TestMain runs the CLI.
const childEnv = "LILY_CLI_TEST_CHILD"

func TestMain(m *testing.M) {
	if q := os.Getenv(holdChildQueue); q != "" { // reconcile_process_test.go
		os.Exit(holdChild(q, os.Getenv(holdChildURL), os.Getenv(holdChildCatalog), os.Getenv(holdChildDir)))
	}
	if os.Getenv(childEnv) == "1" {
		os.Exit(Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Setenv(childEnv, "1") // inherited by the children the tests start
	// The API's tokens come from the tests, never from the shell that ran
	// them: a test that wants tokens sets LILY_TOKENS itself (t.Setenv,
	// serially), so that the parallel 'lily serve' tests run without any.
	os.Unsetenv("LILY_TOKENS")
	testparallel.Default(cliParallel)
	os.Exit(m.Run())
}

// cliParallel is how many of this package's parallel tests run at once
// unless -test.parallel says otherwise. Most of them wait on child
// processes and brokers, not on the CPU: at the default (GOMAXPROCS, 2
// here) the package took 153 s of wall for 136 s of CPU; at 6, 105 s for
// the same CPU, and it is the longest package of the suite.
const cliParallel = 6

// run executes the CLI with args and returns the exit code and output.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// child is a lily command in a child process (the test binary, see
// TestMain).
type child struct {
	cmd       *exec.Cmd
	out, errb *transporttest.SyncBuffer
	holder    string // 'lily serve': its ingest lease holder (serveChild)
}

// lilyChild starts 'lily args...' in a child process, its output
// captured; a child still running when the test ends is killed.
func lilyChild(t *testing.T, args ...string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{out: &transporttest.SyncBuffer{}, errb: &transporttest.SyncBuffer{}}
	c.cmd = exec.Command(exe, args...)
	c.cmd.Env = append(os.Environ(), childEnv+"=1")
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.errb
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	})
	return c
}

// exit waits up to within for the child to end and returns its exit code
// (-1: ended by a signal); past within it is killed and the test fails.
func (c *child) exit(t *testing.T, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(within):
		c.cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not end within %s\nstdout: %s\nstderr: %s", c.cmd.Args[1:], within, c.out.String(), c.errb.String())
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%v: %v", c.cmd.Args[1:], err)
	}
	return c.cmd.ProcessState.ExitCode()
}

// runChild runs 'lily args...' to its end in a child process (a second
// process, as an operator's command beside the consumers) and returns its
// exit code and output.
func runChild(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	c := lilyChild(t, args...)
	code := c.exit(t, 2*time.Minute)
	return code, c.out.String(), c.errb.String()
}
