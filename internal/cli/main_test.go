package cli

import (
	"bytes"
	"context"
	"os"
	"testing"
)

// childEnv marks a test binary started as a lily child process (the demo's
// worker): os.Executable() is the test binary, so TestMain runs the CLI.
const childEnv = "LILY_CLI_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Setenv(childEnv, "1") // inherited by the children the tests start
	os.Exit(m.Run())
}

// run executes the CLI with args and returns the exit code and output.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}
