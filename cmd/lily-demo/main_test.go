package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/lily-mq/lily/internal/testparallel"
)

// childEnv marks a test binary started as a lily-demo child process (the
// demo's worker): os.Executable() is the test binary, so TestMain runs
// the command.
const childEnv = "LILY_DEMO_CMD_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Setenv(childEnv, "1") // inherited by the workers the demo starts
	testparallel.ChildrenExitAtOnce()
	os.Exit(m.Run())
}

// lilyDemo runs 'lily-demo args...' in the test's process (a
// demotest.Runner).
func lilyDemo(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestUsage: lily-demo exits 2 on bad input, naming what is wrong, and its
// help names the in-process brokers it starts.
func TestUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--transport", "carrier-pigeon"}, "must be sqlite, rabbitmq, kafka, sqs, pubsub, nats or azqueue"},
		{[]string{"--messages", "ten"}, `invalid argument "ten" for "--messages"`},
		{[]string{"--share-group", "workers"}, "share groups exist only on Kafka"},
		{[]string{"orders"}, `unknown command "orders"`},
	} {
		if code, _, errOut := lilyDemo(t, c.args...); code != 2 || !strings.HasPrefix(errOut, "lily-demo: ") || !strings.Contains(errOut, c.want) {
			t.Errorf("lily-demo %v: exit %d %q, want exit 2 naming %q", c.args, code, errOut, c.want)
		}
	}
	code, out, _ := lilyDemo(t, "--help")
	for _, w := range []string{"On Kafka without --brokers the demo\nstarts an in-process Kafka (kfake)", "SQS emulator (goaws)", "Pub/Sub fake (pstest)", "default: an in-process Kafka, kfake"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("lily-demo --help: exit %d, lacks %q:\n%s", code, w, out)
		}
	}
}
