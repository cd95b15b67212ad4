// Package bench measures Lily's embedded SQLite store against goqite and a
// bare-SQL ceiling (docs/design.md §12): the publish + consume + ack round trip of N
// messages, each run on a fresh database file with the same durability
// (WAL, synchronous FULL, one connection per process).
//
// It is its own module so that the peers it compares against (goqite) stay
// out of Lily's go.mod. The program is cmd/sqlitebench; the same runs are Go
// benchmarks in sqlite_test.go.
package bench

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/riverqueue/river"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Config is one benchmark run's parameters. The zero value of every field
// means its default.
type Config struct {
	// N is the number of messages published, consumed and acked.
	// Defaults to 100000.
	N int
	// BodySize is the message body size in bytes (at least 8: the first 8
	// bytes carry the message's sequence number). Defaults to 512.
	BodySize int
	// PublishBatch is the number of messages per publish call (one
	// transaction). Defaults to 100.
	PublishBatch int
	// Batch is the receive/settle batch of the raw transport run and the
	// transaction size of the bare SQL ceiling. Defaults to 100.
	Batch int
	// Concurrency is the consumer parallelism: Lily's handler goroutines and
	// goqite's receiving goroutines (or jobs runner limit). Defaults to 4.
	Concurrency int
	// Prefetch is the Lily consumer's prefetch window. Defaults to 1024.
	Prefetch int
	// SettleBatch is the Lily consumer's group-commit size. Defaults to 512.
	SettleBatch int
	// GoqitePoll is the poll interval of goqite's ReceiveAndWait and jobs
	// runner. Defaults to 1ms.
	GoqitePoll time.Duration
	// Dir is where the temporary database directories are created.
	// Defaults to os.TempDir().
	Dir string
	// Timeout bounds one run. Defaults to 10 minutes.
	Timeout time.Duration
	// Headers, when set, gives every Lily message four typical string
	// headers (traceparent, content-type, a tenant and a request ID), which
	// the transport stores as typed JSON. goqite has no headers, so the
	// comparison runs leave it off. Diagnostic.
	Headers bool
	// RiverWorkers is the River client's MaxWorkers on its queue.
	// Defaults to 4 (= Concurrency's default).
	RiverWorkers int
	// RiverFetchCooldown is River's FetchCooldown, the least time between
	// two fetches of jobs. Defaults to River's minimum, 1 ms (as goqite's
	// poll): with River's own default, 100 ms, a client with 4 workers
	// fetches at most 4 jobs per 100 ms (≈ 40 jobs/s).
	// RiverFetchPoll is River's FetchPollInterval (the fallback poll; an
	// insert by the same client triggers a fetch). Defaults to River's
	// default, 1 s.
	RiverFetchCooldown, RiverFetchPoll time.Duration
	// Consumers is the number of competing Lily consumers of the
	// lily-competing run, on one transport and one queue. Defaults to 4.
	Consumers int
	// TempStoreMemory, when set, runs every system with PRAGMA temp_store =
	// MEMORY (Lily's transport gets it on its one connection after Open):
	// SQLite then keeps statement journals in memory instead of spilling
	// those above 64 KiB to a temporary file. No effect on durability
	// (a statement journal only serves a statement's own rollback).
	// Diagnostic; Lily does not set it.
	TempStoreMemory bool
	// Trace, when set, receives a per-method summary (calls, batch sizes,
	// time) of the transport calls of the Lily runs. Diagnostic.
	Trace io.Writer
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.N <= 0 {
		c.N = 100000
	}
	if c.BodySize < 8 {
		c.BodySize = 512
	}
	if c.PublishBatch <= 0 {
		c.PublishBatch = 100
	}
	if c.Batch <= 0 {
		c.Batch = 100
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.Prefetch <= 0 {
		c.Prefetch = 1024
	}
	if c.SettleBatch <= 0 {
		c.SettleBatch = 512
	}
	if c.RiverWorkers <= 0 {
		c.RiverWorkers = 4
	}
	if c.RiverFetchCooldown <= 0 {
		c.RiverFetchCooldown = river.FetchCooldownMin
	}
	if c.RiverFetchPoll <= 0 {
		c.RiverFetchPoll = river.FetchPollIntervalDefault
	}
	if c.Consumers <= 0 {
		c.Consumers = 4
	}
	if c.GoqitePoll <= 0 {
		c.GoqitePoll = time.Millisecond
	}
	if c.Dir == "" {
		c.Dir = os.TempDir()
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Minute
	}
	return c
}

// Result is one measured run.
type Result struct {
	// Name identifies the system measured.
	Name string
	// N messages went through publish, consume and ack.
	N int
	// Elapsed is the wall time from the first publish to the last ack.
	Elapsed time.Duration
	// CPU is the process's user+system CPU time over the measured interval
	// (all goroutines; the machine has GOMAXPROCS cores).
	CPU time.Duration
	// WriteBytes and WriteCalls are the bytes and write system calls the
	// process made over the measured interval (/proc/self/io wchar and
	// syscw; zero where unavailable): the WAL and checkpoint traffic.
	WriteBytes, WriteCalls int64
	// Notes describe how the run was made (batch sizes, API used).
	Notes string
	// Handled and Duplicates, set by the competing-consumer run, are the
	// handler calls and the event IDs handled more than once (0 when
	// not counted).
	Handled, Duplicates int64
}

// ioCounters returns the process's written bytes and write calls so far.
func ioCounters() (wchar, syscw int64) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "wchar":
			wchar = n
		case "syscw":
			syscw = n
		}
	}
	return wchar, syscw
}

// meter measures one run's wall time, CPU time and writes.
type meter struct {
	start        time.Time
	cpu0         time.Duration
	wchar0, scw0 int64
}

func startMeter() meter {
	m := meter{cpu0: CPUTime()}
	m.wchar0, m.scw0 = ioCounters()
	m.start = time.Now()
	return m
}

// stop returns a Result with Elapsed, CPU, WriteBytes and WriteCalls
// measured since start; the caller names it with done.
func (m meter) stop() Result {
	r := Result{Elapsed: time.Since(m.start)}
	r.CPU = CPUTime() - m.cpu0
	w, c := ioCounters()
	r.WriteBytes, r.WriteCalls = w-m.wchar0, c-m.scw0
	return r
}

// done returns r with the fields that describe the run.
func (r Result) done(name string, n int, notes string) Result {
	r.Name, r.N, r.Notes = name, n, notes
	return r
}

// CPUTime returns the process's user+system CPU time so far.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// PerSecond is the round-trip throughput in messages per second.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.N) / r.Elapsed.Seconds()
}

// Runner is one of the measured systems.
type Runner struct {
	// Name is the short name used in flags and benchmark names.
	Name string
	// Run does one run on a fresh database in a new temporary directory.
	Run func(ctx context.Context, c Config) (Result, error)
}

// Runners lists the measured systems in table order.
func Runners() []Runner {
	return []Runner{
		{"lily-runtime", RunLilyRuntime},
		{"lily-competing", RunLilyCompeting},
		{"lily-raw", RunLilyRaw},
		{"goqite", RunGoqite},
		{"goqite-jobs", RunGoqiteJobs},
		{"goqite-batched", RunGoqiteBatched},
		{"river", RunRiver},
		{"bare-sql", RunBareSQL},
	}
}

// Experiments lists runs that are not part of the comparison: variants of
// the bare-SQL loop that test a design idea.
func Experiments() []Runner {
	return []Runner{
		{"bare-sql-split", RunBareSQLSplit},
		{"lily-shapes", RunLilyShapes},
		{"lily-shapes-json", RunLilyShapesJSONAck},
		{"lily-competing-files", RunLilyCompetingFiles},
	}
}

// sampleHeaders returns four typical string headers for message seq.
func sampleHeaders(seq int) map[string]any {
	return map[string]any{
		"traceparent":  fmt.Sprintf("00-%032x-%016x-01", seq+1, seq+1),
		"content-type": "application/json",
		"x-tenant-id":  "tenant-42",
		"x-request-id": fmt.Sprintf("req-%08d", seq),
	}
}

// makeBody returns a body of size bytes whose first 8 bytes are seq.
func makeBody(seq, size int) []byte {
	b := make([]byte, size)
	for i := 8; i < size; i++ {
		b[i] = byte('a' + (seq+i)%26)
	}
	binary.BigEndian.PutUint64(b, uint64(seq))
	return b
}

// makeBodies returns the bodies of the c.N messages of a run (made before
// the clock starts).
func makeBodies(c Config) [][]byte {
	bodies := make([][]byte, c.N)
	for i := range bodies {
		bodies[i] = makeBody(i, c.BodySize)
	}
	return bodies
}

// tracker checks conservation: every sequence number is consumed exactly
// once.
type tracker struct {
	seen  []atomic.Bool
	count atomic.Int64
	dups  atomic.Int64
	bad   atomic.Int64
	done  chan struct{}
	n     int64
}

func newTracker(n int) *tracker {
	return &tracker{seen: make([]atomic.Bool, n), done: make(chan struct{}), n: int64(n)}
}

// consumed records the body of a consumed message.
func (t *tracker) consumed(body []byte) {
	if len(body) < 8 {
		t.bad.Add(1)
		return
	}
	seq := binary.BigEndian.Uint64(body)
	if seq >= uint64(len(t.seen)) {
		t.bad.Add(1)
		return
	}
	if t.seen[seq].Swap(true) {
		t.dups.Add(1)
	}
}

// acked counts one acknowledgement and closes done at n.
func (t *tracker) acked(k int64) {
	if t.count.Add(k) == t.n {
		close(t.done)
	}
}

// check reports any conservation failure of the consumer side.
func (t *tracker) check() error {
	if c := t.count.Load(); c != t.n {
		return fmt.Errorf("conservation: %d of %d acked", c, t.n)
	}
	if d := t.dups.Load(); d > 0 {
		return fmt.Errorf("conservation: %d duplicate deliveries", d)
	}
	if b := t.bad.Load(); b > 0 {
		return fmt.Errorf("conservation: %d deliveries with a foreign body or lost headers", b)
	}
	for i := range t.seen {
		if !t.seen[i].Load() {
			return fmt.Errorf("conservation: message %d never consumed", i)
		}
	}
	return nil
}

// wait blocks until all messages are acked, ctx is done, or errc yields.
func (t *tracker) wait(ctx context.Context, errc <-chan error) error {
	for {
		select {
		case <-t.done:
			return nil
		case err := <-errc:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("timed out with %d of %d acked: %w", t.count.Load(), t.n, ctx.Err())
		}
	}
}

// tempDB makes a fresh directory for one run's database file and returns
// the file path and a cleanup function.
func tempDB(c Config, name string) (string, func(), error) {
	dir, err := os.MkdirTemp(c.Dir, "lilybench-"+name+"-*")
	if err != nil {
		return "", nil, err
	}
	return filepath.Join(dir, "bench.db"), func() { os.RemoveAll(dir) }, nil
}

// openSQLite opens path with the settings of Lily's internal/sqlitedb.Open
// (replicated here: an internal package cannot be imported from another
// module): WAL, synchronous FULL, busy timeout 10 s, foreign keys on,
// BEGIN IMMEDIATE, one connection.
func openSQLite(ctx context.Context, c Config, path string) (*sql.DB, error) {
	q := url.Values{}
	if c.TempStoreMemory {
		q.Add("_pragma", "temp_store(MEMORY)")
	}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Add("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if err := checkPragmas(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// checkPragmas fails unless db runs in WAL mode with synchronous FULL, so
// that no run is measured with weaker durability than the others.
func checkPragmas(ctx context.Context, db *sql.DB) error {
	var mode string
	var sync int
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return err
	}
	if err := db.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil {
		return err
	}
	if mode != "wal" || sync != 2 {
		return fmt.Errorf("durability settings: journal_mode=%s synchronous=%d, want wal and 2 (FULL)", mode, sync)
	}
	return nil
}

// openDB opens a fresh database for run name (see openSQLite) and creates
// schema in it; cleanup closes it and removes its directory.
func openDB(ctx context.Context, c Config, name, schema string) (db *sql.DB, cleanup func(), err error) {
	path, rmdir, err := tempDB(c, name)
	if err != nil {
		return nil, nil, err
	}
	if db, err = openSQLite(ctx, c, path); err != nil {
		rmdir()
		return nil, nil, err
	}
	if _, err := db.ExecContext(ctx, schema); err != nil {
		db.Close()
		rmdir()
		return nil, nil, fmt.Errorf("schema: %w", err)
	}
	return db, func() { db.Close(); rmdir() }, nil
}

// inTx runs f in a transaction of db and commits it, or rolls it back when
// f fails.
func inTx(ctx context.Context, db *sql.DB, f func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// checkEmpty fails unless the count query yields 0; what completes the
// message ("conservation: N " + what).
func checkEmpty(ctx context.Context, db *sql.DB, query, what string) error {
	var left int64
	if err := db.QueryRowContext(ctx, query).Scan(&left); err != nil {
		return err
	}
	if left != 0 {
		return fmt.Errorf("conservation: %d %s", left, what)
	}
	return nil
}

// placeholders returns n comma-separated SQL parameters: "?,?,?".
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// tuples returns n comma-separated tuples of width parameters, for a
// multi-row INSERT: "(?,?),(?,?)".
func tuples(n, width int) string {
	return strings.TrimSuffix(strings.Repeat("("+placeholders(width)+"),", n), ",")
}

// execBatch executes in tx the statement full, prepared for a batch of
// size rows, when n == size, and otherwise (a short last batch) query(n)
// unprepared.
func execBatch(ctx context.Context, tx *sql.Tx, full *sql.Stmt, query func(int) string, n, size int, args []any) (sql.Result, error) {
	if n == size {
		return tx.StmtContext(ctx, full).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, query(n), args...)
}

// consumeRows reads rows of (id, body), records each body with tr,
// appends each id to *ids unless ids is nil, and closes rows.
func consumeRows(rows *sql.Rows, tr *tracker, ids *[]any) error {
	defer rows.Close()
	for rows.Next() {
		var id int64
		var body []byte
		if err := rows.Scan(&id, &body); err != nil {
			return err
		}
		tr.consumed(body)
		if ids != nil {
			*ids = append(*ids, id)
		}
	}
	return rows.Err()
}
