// Package pgtest gives tests a PostgreSQL catalog of their own on the
// machine's server (docs/design.md §11): a fresh schema per call, dropped when the
// test ends. Without a server the test is skipped with a loud message,
// except under CI=true, where it fails.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// ServerURL is the test server: LILY_TEST_POSTGRES_URL, or the machine's
// PostgreSQL on 127.0.0.1:5432 (trust auth, database test).
func ServerURL() string {
	if u := os.Getenv("LILY_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// URL creates a schema of its own for t and returns a URL whose
// connections use it (search_path), so that catalogs of parallel tests
// never meet. The schema is dropped when t ends.
func URL(t testing.TB) string {
	t.Helper()
	base := ServerURL()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := sql.Open("pgx", base)
	if err == nil {
		err = db.PingContext(ctx)
	}
	if err != nil {
		if db != nil {
			db.Close()
		}
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is not reachable at %s (CI=true: start it with the machine's command, see .ci/run): %v", base, err)
		}
		t.Skipf("SKIPPED — PostgreSQL is not reachable at %s: %v (set LILY_TEST_POSTGRES_URL or start the server)", base, err)
	}
	var b [6]byte
	rand.Read(b[:])
	schema := "lily_test_" + hex.EncodeToString(b[:])
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		db.Close()
		t.Fatalf("pgtest: create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("pgtest: parse %s: %v", base, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	// A commit does not wait for its WAL to reach the disk (5 ms a commit
	// on this machine's disk, 1 ms without): the tests kill processes, never
	// the server, so nothing they check depends on that flush, and the
	// catalog's tests commit thousands of times. A URL that sets it keeps
	// its own value.
	if !q.Has("synchronous_commit") {
		q.Set("synchronous_commit", "off")
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Finishes runs fn and fails t when it has not returned within a minute
// (a watchdog for tests that another transaction's locks must not block:
// it turns a hang into a failure, it times nothing). fn runs on its own
// goroutine, so a hang does not stop the test's cleanup, which releases
// the locks and lets fn end. It returns fn's error.
func Finishes(t testing.TB, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatalf("%s waited for another transaction's locks (want no wait)", what)
		return nil
	}
}
