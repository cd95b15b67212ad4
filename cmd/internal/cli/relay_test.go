package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/internal/sqlitedb"
	"github.com/lily-mq/lily/outbox"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

// TestRelayCommand: 'lily relay --once --json' publishes an application's
// outbox rows to the configured SQLite queue, with their event IDs, and
// leaves none pending; a row for an unconfigured queue stays and fails.
func TestRelayCommand(t *testing.T) {
	ctx := context.Background()
	cfg, tr, appPath, app := relayFixture(t, []string{"orders.created"}, "orders.created")
	tx, err := app.Begin()
	if err != nil {
		t.Fatal(err)
	}
	msgs := []outbox.Message{
		{Queue: "orders.created", Message: lily.Message{Key: "c1", Body: []byte(`{"n":1}`)}},
		{Queue: "orders.created", Message: lily.Message{Key: "c1", Body: []byte(`{"n":2}`)}},
	}
	if err := outbox.Add(ctx, tx, msgs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := run(t, "relay", "--config", cfg, "--outbox", appPath, "--once", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	var out relayJSON
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if out.Published != 2 || out.Pending != 0 || out.Failed != 0 {
		t.Fatalf("relay: %+v", out)
	}
	ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: "orders.created", Max: 10, Wait: time.Second, Consumer: "t"})
	if err != nil || len(ds) != 2 || ds[0].EventID != msgs[0].EventID || ds[1].EventID != msgs[1].EventID {
		t.Fatalf("received %d (%v), want the two rows in order with their event IDs", len(ds), err)
	}
	var ss []transport.Settlement
	for _, d := range ds {
		ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
	}
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
		t.Fatal(err)
	}

	tx, _ = app.Begin()
	if err := outbox.Add(ctx, tx, outbox.Message{Queue: "nowhere", Message: lily.Message{Body: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	tx.Commit()
	code, stdout, _ = run(t, "relay", "--config", cfg, "--outbox", appPath, "--once", "--json")
	if code != 1 {
		t.Fatalf("a row for an unconfigured queue: exit %d, want 1: %s", code, stdout)
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || out.Failed != 1 || out.Pending != 1 {
		t.Fatalf("relay: %+v %v", out, err)
	}
}

// relayFixture writes a configuration with the given queues on a SQLite
// store, declares the queues of declared in that store (a configured
// queue left out refuses every publish), and opens a migrated outbox
// database beside it. All of it is closed when the test ends.
func relayFixture(t *testing.T, configured []string, declared ...string) (cfg string, tr *sqlite.Transport, appPath string, app *sql.DB) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	store := filepath.Join(dir, "lily.db")
	cfg = filepath.Join(dir, "lily.toml")
	toml := "db = \"" + store + "\"\n"
	for _, q := range configured {
		toml += "\n[[queue]]\nname = \"" + q + "\"\n"
	}
	if err := os.WriteFile(cfg, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	tr, err := sqlite.Open(ctx, store, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	var specs []transport.QueueSpec
	for _, q := range declared {
		specs = append(specs, lily.QueueConfig{Name: q}.WithDefaults().Spec())
	}
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: specs}); err != nil {
		t.Fatal(err)
	}
	appPath = filepath.Join(dir, "app.db")
	app, err = sqlitedb.Open(ctx, appPath, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	if err := outbox.Migrate(ctx, app); err != nil {
		t.Fatal(err)
	}
	return cfg, tr, appPath, app
}
