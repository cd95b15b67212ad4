package demo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/lily-mq/lily/cmd/internal/cli"

	"github.com/lily-mq/lily/internal/testparallel"
)

// The tests run the demo as users do, through 'lily demo' (package cli,
// with no in-process broker), and check what it left with the other lily
// commands.

// childEnv marks a test binary started as a lily child process (the demo's
// worker): os.Executable() is the test binary, so TestMain runs the CLI.
const childEnv = "LILY_DEMO_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(cli.Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Setenv(childEnv, "1") // inherited by the workers the demo starts
	// The tests wait on the broker and the workers far more than they
	// compute (docs/testing.md).
	testparallel.Default(4)
	testparallel.ChildrenExitAtOnce()
	os.Exit(m.Run())
}

// run executes 'lily args...' and returns the exit code and output.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cli.Run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// lilyDemo runs 'lily demo args...' (a demotest.Runner).
func lilyDemo(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return run(t, append([]string{"demo"}, args...)...)
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "lily.toml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustJSON(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
}

// reconciled is what the tests read of 'lily reconcile --json'.
type reconciled struct {
	Queues []struct {
		Queue     string `json:"queue"`
		Accepted  int64  `json:"accepted"`
		Discarded int64  `json:"discarded"`
		InFlight  int64  `json:"in_flight"`
		Lost      int64  `json:"lost"`
	} `json:"queues"`
	Balanced bool `json:"balanced"`
}

// audited is what the tests read of 'lily audit --json': the count of
// each action/outcome.
func audited(t *testing.T, out string) map[string]int {
	t.Helper()
	var audit struct {
		Records []struct {
			Action  string `json:"action"`
			Outcome string `json:"outcome"`
			Count   int    `json:"count"`
		} `json:"records"`
	}
	mustJSON(t, out, &audit)
	n := map[string]int{}
	for _, r := range audit.Records {
		n[r.Action+"/"+r.Outcome] += r.Count
	}
	return n
}
