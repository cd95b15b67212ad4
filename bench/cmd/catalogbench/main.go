// Command catalogbench measures Lily's dead-letter catalog at scale (docs/design.md
// §12): 'lily dlq group' over 1,000,000 entries, list and peek, a streamed
// scan, a dry-run redrive, a rate-limited or unthrottled redrive through
// the SQLite transport or RabbitMQ, and peak memory as the catalog grows —
// on SQLite or PostgreSQL. It prints markdown tables.
//
//	cd bench && go run ./cmd/catalogbench all -sizes 10000,100000,1000000
//	go run ./cmd/catalogbench all -sizes 1000000 -repeat 2 \
//	    -catalog 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//	go run ./cmd/catalogbench redrive -n 100000 -rate 0 -transport rabbitmq \
//	    -catalog 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable'
//
// Subcommands:
//
//	build   -db F | -catalog URL -entries N
//	                                  fill a new catalog with N pending entries (512-byte bodies):
//	                                  the SQLite file F, or the PostgreSQL catalog at URL (whose
//	                                  search_path names an empty schema; build ends with VACUUM)
//	ops     -db F | -catalog URL      time list, group (every column), peek, a full streamed scan
//	                                  and a dry-run redrive; print peak RSS and Go heap
//	search  -db F | -catalog URL      time 'lily dlq search' (first page of 50: a word of one body,
//	                                  a phrase of 1/8 of the messages, a word of every body, a
//	                                  prefix, with filters, no hit; every hit streamed) and a
//	                                  --where scan; print peak RSS, Go heap and the index size
//	redrive -n N -rate R [-catalog URL] [-transport sqlite|rabbitmq] [-amqp URL] [-batch B]
//	                                  redrive N entries at R/s (0: unthrottled) and report the
//	                                  achieved rate, overall and per five seconds, and what arrived;
//	                                  with -catalog the catalog is a fresh schema on that server
//	                                  (CREATE SCHEMA, search_path), dropped afterwards; rabbitmq
//	                                  declares a fresh quorum queue with Lily's transport, drains
//	                                  it while the redrive runs, counting event IDs, and deletes it
//	all     -sizes A,B,C [-repeat K] [-catalog URL] and the redrive flags
//	                                  build and ops (K times) for each size, each in a fresh process
//	                                  (so the peak RSS is that size's) and, with -catalog, a fresh
//	                                  schema; then the redrive
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/lily-mq/lily/catalog"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: catalogbench build|ops|search|redrive|all [flags]")
		return 2
	}
	ctx := context.Background()
	fs := flag.NewFlagSet("catalogbench "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", "catalog database file (SQLite)")
	pgURL := fs.String("catalog", "", "PostgreSQL catalog URL: build and ops use it as it is; all and redrive make a fresh schema on its server")
	trKind := fs.String("transport", "sqlite", "redrive transport: sqlite or rabbitmq")
	amqpURL := fs.String("amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL (-transport rabbitmq)")
	batch := fs.Int("batch", 0, "redrive batch size (0: the catalog's default)")
	repeat := fs.Int("repeat", 1, "ops runs per size ('all')")
	entries := fs.Int("entries", 100000, "entries to build")
	n := fs.Int("n", 100000, "entries to redrive")
	rateFlag := fs.Float64("rate", 5000, "redrive rate, messages per second (0: unthrottled)")
	sizes := fs.String("sizes", "10000,100000,1000000", "catalog sizes for 'all'")
	dir := fs.String("dir", "", "directory for the databases (default: a new temporary directory)")
	asJSON := fs.Bool("json", false, "print JSON (ops, redrive)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile to this file")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "catalogbench:", err)
			return 1
		}
		defer f.Close()
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *db != "" && *pgURL != "" {
		fmt.Fprintln(stderr, "catalogbench: -db and -catalog: give one")
		return 2
	}
	if *pgURL != "" && !catalog.IsPostgresURL(*pgURL) {
		fmt.Fprintf(stderr, "catalogbench: -catalog %q: want a postgres:// URL\n", *pgURL)
		return 2
	}
	where := *db
	if *pgURL != "" {
		where = *pgURL
	}
	rc := redriveConfig{Dir: *dir, N: *n, Rate: *rateFlag, Batch: *batch, Catalog: *pgURL, Transport: *trKind, AMQP: *amqpURL}
	var err error
	switch args[0] {
	case "build":
		err = build(ctx, where, *entries, stderr)
	case "ops":
		var r opsResult
		if r, err = ops(ctx, where); err == nil {
			err = printOps(stdout, []opsResult{r}, *asJSON)
		}
	case "redrive":
		var r redriveResult
		if r, err = redriveBench(ctx, rc); err == nil {
			err = printRedrive(stdout, r, *asJSON)
		}
	case "search": // search.go
		var r searchResult
		if r, err = searchOps(ctx, where); err == nil {
			err = printSearch(stdout, r, *asJSON)
		}
	case "all":
		err = all(ctx, *sizes, *repeat, rc, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "catalogbench: unknown subcommand %q: use build, ops, search, redrive or all\n", args[0])
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "catalogbench:", err)
		return 1
	}
	return 0
}

// all builds each size and measures it in a child process (so that the
// peak RSS reported is that size's alone), then runs the redrive. With
// c.Catalog, each size is a fresh schema on that PostgreSQL server.
func all(ctx context.Context, sizeList string, repeat int, c redriveConfig, stdout, stderr io.Writer) error {
	dir, cleanup, err := workDir(c.Dir)
	if err != nil {
		return err
	}
	defer cleanup()
	c.Dir = dir
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var results []opsResult
	for _, sz := range strings.Split(sizeList, ",") {
		size, err := strconv.Atoi(strings.TrimSpace(sz))
		if err != nil || size <= 0 {
			return fmt.Errorf("-sizes: %q is not a positive number", sz)
		}
		rs, err := buildAndMeasure(ctx, exe, dir, size, repeat, c.Catalog, stderr)
		results = append(results, rs...)
		if err != nil {
			return err
		}
	}
	if err := printOps(stdout, results, false); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "redriving %d entries at %g/s through %s ...\n", c.N, c.Rate, c.Transport)
	r, err := redriveBench(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	return printRedrive(stdout, r, false)
}

// buildAndMeasure builds one catalog of size entries (a SQLite file in
// dir, or a fresh schema on the PostgreSQL server pgBase) and runs ops on
// it repeat times, each in a child process; the catalog is removed after.
func buildAndMeasure(ctx context.Context, exe, dir string, size, repeat int, pgBase string, stderr io.Writer) (_ []opsResult, err error) {
	flag, where := "-db", filepath.Join(dir, fmt.Sprintf("catalog-%d.db", size))
	if pgBase != "" {
		u, drop, err := freshSchema(ctx, pgBase)
		if err != nil {
			return nil, err
		}
		defer func() {
			if derr := drop(); derr != nil && err == nil {
				err = derr
			}
		}()
		flag, where = "-catalog", u
	} else {
		defer removeDB(where)
	}
	fmt.Fprintf(stderr, "building %d entries in %s ...\n", size, where)
	if err := child(ctx, exe, stderr, nil, "build", flag, where, "-entries", strconv.Itoa(size)); err != nil {
		return nil, err
	}
	var results []opsResult
	for range max(1, repeat) {
		var out strings.Builder
		load := loadAvg()
		if err := child(ctx, exe, stderr, &out, "ops", flag, where, "-json"); err != nil {
			return results, err
		}
		var rs []opsResult
		if err := json.Unmarshal([]byte(out.String()), &rs); err != nil {
			return results, fmt.Errorf("ops output: %w", err)
		}
		fmt.Fprintf(stderr, "  ops on %s, %d entries: load average %s before, %s after\n", rs[0].Store, size, load, loadAvg())
		results = append(results, rs...)
	}
	return results, nil
}

func child(ctx context.Context, exe string, stderr io.Writer, stdout io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = stderr
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// peakRSS returns the process's peak resident set size (VmHWM) in bytes.
func peakRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

// heapSampler records the largest Go heap in use while it runs.
type heapSampler struct {
	stop chan struct{}
	done chan int64
}

func sampleHeap() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan int64, 1)}
	go func() {
		var peak int64
		var ms runtime.MemStats
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, int64(ms.HeapInuse))
			select {
			case <-h.stop:
				h.done <- peak
				return
			case <-t.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) Stop() int64 {
	close(h.stop)
	return <-h.done
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// workDir returns dir, or when it is empty a new temporary directory that
// cleanup removes.
func workDir(dir string) (string, func(), error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	d, err := os.MkdirTemp("", "catalogbench-")
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}

// removeDB removes a SQLite database file and its WAL and shared-memory
// files.
func removeDB(path string) {
	os.Remove(path)
	os.Remove(path + "-wal")
	os.Remove(path + "-shm")
}
