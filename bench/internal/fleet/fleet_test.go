package fleet

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/bench/internal/proccpu"
	"github.com/lily-mq/lily/internal/pgtest"
)

// burnEnv makes the test binary, started again by TestStartAndReadCPU, a
// child that spends CPU and then waits for its standard input to close.
const burnEnv = "FLEET_TEST_BURN"

func TestMain(m *testing.M) {
	if os.Getenv(burnEnv) != "" {
		// The CPU the parent must read: a busy loop until this process
		// has used 100 ms of it (by its own /proc reading, however
		// loaded the machine).
		for {
			if cpu, ok := proccpu.Of(os.Getpid()); !ok || cpu >= 100*time.Millisecond {
				break
			}
		}
		fmt.Println("burnt")
		var b [1]byte
		os.Stdin.Read(b[:])
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestStartAndReadCPU starts the test binary again in a role (Start),
// reads its CPU from /proc (ReadCPU, PIDs) and turns it into CPU per
// message (PerMessage): a child that spent 100 ms of CPU reads as
// 100 µs a message over 1,000 messages, or more.
func TestStartAndReadCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skipf("SKIPPED — no /proc on this system: %v", err)
	}
	cmd, err := Start(burnEnv + "=1")
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	before := ReadCPU(nil, nil)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("the child: %v", err)
		}
	}()
	// The child says when it has burnt its CPU.
	line := make([]byte, 6)
	if _, err := out.Read(line); err != nil || string(line) != "burnt\n" {
		t.Fatalf("the child said %q (%v), want burnt", line, err)
	}
	after := ReadCPU([]*exec.Cmd{cmd}, PIDs(cmd.Process.Pid)) // the child as the "broker" too
	procs, _, broker := after.PerMessage(before, 1000)
	if procs < 100 || broker != procs {
		t.Fatalf("child CPU %.1f µs/msg, as broker %.1f: want ≥ 100 µs (100 ms over 1,000 messages), both the same", procs, broker)
	}
	if n := len(ReadCPU(nil, nil).Procs); n != 0 {
		t.Fatalf("ReadCPU of no processes read %d", n)
	}
}

// TestSchemaURL checks that the URL keeps the server's settings and adds
// the schema as search_path.
func TestSchemaURL(t *testing.T) {
	got, err := SchemaURL("postgres://u@h:5432/db?sslmode=disable", "run_1")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(got)
	if q := u.Query(); q.Get("search_path") != "run_1" || q.Get("sslmode") != "disable" || u.Host != "h:5432" || u.Path != "/db" {
		t.Fatalf("SchemaURL = %s, want the same server with search_path=run_1", got)
	}
	if _, err := SchemaURL("postgres://u@h:5432/db\x7f", "x"); err == nil || !strings.Contains(err.Error(), "PostgreSQL URL") {
		t.Fatalf("a bad URL gave %v, want an error naming it", err)
	}
}

// TestCreateSchema creates a schema on the machine's PostgreSQL, checks
// that a table made through its URL lands in it, and drops it.
func TestCreateSchema(t *testing.T) {
	base := pgtest.URL(t) // skips loudly without a server (fails under CI=true)
	ctx := context.Background()
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	schema := fmt.Sprintf("fleet_test_%d", os.Getpid())
	u, err := CreateSchema(ctx, admin, base, schema)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE t (x int)`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 't'`, schema).Scan(&n); err != nil || n != 1 {
		t.Fatalf("tables named t in %s: %d (%v), want 1", schema, n, err)
	}
	db.Close()
	if err := DropSchema(ctx, admin, schema); err != nil {
		t.Fatal(err)
	}
	if err := admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema %s still there after DropSchema: %d (%v)", schema, n, err)
	}
}
