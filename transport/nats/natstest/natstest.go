// Package natstest gives tests the machine's NATS server with JetStream
// (docs/design.md §11): its URL, once it answered — without a server the
// test is skipped with a loud message, except under CI=true, where it
// fails.
package natstest

import (
	"context"
	"os"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultURL is the machine's server, nats.DefaultURL (this package does
// not import the transport, so that the transport's own internal tests
// can use it; TestNatstestDefaultURL keeps the two equal).
const DefaultURL = "nats://127.0.0.1:4222"

// URL returns the test server's URL — LILY_NATS_URL, or the machine's
// server (DefaultURL) — after checking that it answers with
// JetStream enabled.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("LILY_NATS_URL")
	if u == "" {
		u = DefaultURL
	}
	if err := check(u); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("NATS JetStream is required under CI=true and unreachable at %s: %v", u, err)
		}
		t.Skipf("SKIPPING: NATS JetStream unreachable at %s (%v) — start it with 'nats-server -js' (see .ci/run)", u, err)
	}
	return u
}

func check(u string) error {
	nc, err := natsgo.Connect(u, natsgo.Timeout(5*time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err
}
