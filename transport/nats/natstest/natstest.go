// Package natstest gives tests a NATS server with JetStream
// (docs/design.md §11). URL is the server the tests run on: LILY_NATS_URL
// if set, else a nats-server embedded in the test process (one per
// process, of a version Lily supports: the machine's may be older, see
// nats.MinServerVersion). MachineURL is the machine's own server, for the
// tests of what Lily does on it. Without the server a test asked for, the
// test is skipped with a loud message, except under CI=true, where it
// fails.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultURL is the machine's server, nats.DefaultURL (this package does
// not import the transport, so that the transport's own internal tests
// can use it; TestNatstestDefaultURL keeps the two equal).
const DefaultURL = "nats://127.0.0.1:4222"

// URL returns the URL of the server tests run on — LILY_NATS_URL, else the
// process's embedded server, started on first use — after checking that it
// answers with JetStream enabled. The embedded server's URL is put in
// LILY_NATS_URL, so that child processes the test starts use it too.
func URL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("LILY_NATS_URL"); u != "" {
		return answering(t, u)
	}
	u, err := embedded()
	if err != nil {
		fail(t, "an embedded nats-server could not start: %v", err)
	}
	return answering(t, u)
}

// MachineURL returns the machine's server (DefaultURL), after checking
// that it answers with JetStream enabled.
func MachineURL(t testing.TB) string {
	t.Helper()
	return answering(t, DefaultURL)
}

func answering(t testing.TB, u string) string {
	t.Helper()
	if err := check(u); err != nil {
		fail(t, "NATS JetStream unreachable at %s (%v) — start it with 'nats-server -js' (see .ci/run)", u, err)
	}
	return u
}

func fail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("required under CI=true: "+format, args...)
	}
	t.Skipf("SKIPPING: "+format, args...)
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

var (
	once   sync.Once
	embURL string
	embErr error
)

// embedded starts the process's server once: JetStream on, loopback, a
// port of its own, its store in a directory named after the process.
// The server lives as long as the process; the store directories of
// processes that have ended are removed when the next one starts.
func embedded() (string, error) {
	once.Do(func() {
		root := filepath.Join(os.TempDir(), "lily-natstest")
		removeDeadStores(root)
		dir := filepath.Join(root, strconv.Itoa(os.Getpid()))
		if embErr = os.MkdirAll(dir, 0o755); embErr != nil {
			return
		}
		s, err := server.NewServer(&server.Options{
			Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir,
			NoLog: true, NoSigs: true,
		})
		if err != nil {
			embErr = err
			return
		}
		go s.Start()
		if !s.ReadyForConnections(30 * time.Second) {
			embErr = fmt.Errorf("not ready for connections within 30 s")
			return
		}
		embURL = s.ClientURL()
		embErr = os.Setenv("LILY_NATS_URL", embURL)
	})
	return embURL, embErr
}

// removeDeadStores removes the store directories under root of processes
// that no longer run.
func removeDeadStores(root string) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
}
