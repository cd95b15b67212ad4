package transporttest

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/waittest"
)

// TempCatalog opens a catalog in a temporary SQLite file, closed when the
// test ends.
func TempCatalog(t testing.TB) *catalog.Store {
	t.Helper()
	cat, err := catalog.Open(context.Background(), filepath.Join(t.TempDir(), "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return cat
}

// WaitFor polls cond until it holds, failing the test after 30 seconds
// with what was awaited. It, WaitForState, WaitWithin and Poll are the
// transport tests' names for internal/waittest, the one polling loop of
// Lily's tests: how they wait for events that have no signal of their own
// (a broker's state, a row in a ledger).
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	waittest.For(t, what, cond)
}

// WaitForState is WaitFor for a cond that also describes what it observed
// (a count, the members of a group): the failure prints the last state, so
// that a wait that never ends says how far it got.
func WaitForState(t testing.TB, what string, cond func() (ok bool, state string)) {
	t.Helper()
	waittest.ForState(t, what, cond)
}

// WaitWithin is WaitForState with another limit, for waits that outlast
// 30 seconds by design (a fleet that rides out broker outages).
func WaitWithin(t testing.TB, limit time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	waittest.Poller{Limit: limit}.For(t, what, cond)
}

// Poll calls cond until it holds or ctx ends, and returns whether it held
// and the last state it reported. It does not fail a test: for a goroutine
// that ends a run once a condition holds (RunUntil), or a caller with its
// own verdict.
func Poll(ctx context.Context, cond func() (ok bool, state string)) (bool, string) {
	return waittest.Poller{}.Poll(ctx, cond)
}

// Start runs c in the background until the returned stop is called or the
// test ends. stop waits for Run to return and fails the test if it returned
// an error; calling it again does nothing.
func Start(t *testing.T, c *lily.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("consumer Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// BodyLog is a handler that records, in order, the body of every delivery
// it processed successfully. Fail, when set, decides a delivery's outcome
// first: a non-nil error is returned and nothing is recorded.
type BodyLog struct {
	Fail   func(body string) error
	mu     sync.Mutex
	bodies []string
}

// Handle implements lily.Handler.
func (l *BodyLog) Handle(_ context.Context, d *lily.Delivery) error {
	if l.Fail != nil {
		if err := l.Fail(string(d.Body)); err != nil {
			return err
		}
	}
	l.mu.Lock()
	l.bodies = append(l.bodies, string(d.Body))
	l.mu.Unlock()
	return nil
}

// Bodies returns the recorded bodies, in processing order.
func (l *BodyLog) Bodies() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.bodies)
}

// Firsts returns the recorded bodies with later duplicates (at-least-once
// redeliveries) left out.
func (l *BodyLog) Firsts() []string {
	var out []string
	for _, b := range l.Bodies() {
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out
}

// SyncBuffer is a bytes.Buffer safe for concurrent use: a log destination
// (or a command's output) that the test reads while the code under test
// still writes to it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
