// Command catalogbench measures Lily's dead-letter catalog at scale (DESIGN
// §12): 'lily dlq group' over 1,000,000 entries, a rate-limited redrive of
// 100,000 entries, and peak memory as the catalog grows. It prints
// markdown tables.
//
//	cd bench && go run ./cmd/catalogbench all -sizes 10000,100000,1000000
//
// Subcommands:
//
//	build   -db F -entries N          fill a new catalog with N pending entries (512-byte bodies)
//	ops     -db F                     time list, group (every column), a full streamed scan and a
//	                                  dry-run redrive on F; print peak RSS and Go heap
//	redrive -n N -rate R              redrive N entries through the SQLite transport at R/s and
//	                                  report the achieved rate, overall and per second
//	all     -sizes A,B,C -n N -rate R build and ops for each size (each in a fresh process, so the
//	                                  peak RSS is that size's), then redrive
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
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: catalogbench build|ops|redrive|all [flags]")
		return 2
	}
	ctx := context.Background()
	fs := flag.NewFlagSet("catalogbench "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", "catalog database file")
	entries := fs.Int("entries", 100000, "entries to build")
	n := fs.Int("n", 100000, "entries to redrive")
	rateFlag := fs.Float64("rate", 5000, "redrive rate, messages per second")
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
	var err error
	switch args[0] {
	case "build":
		err = build(ctx, *db, *entries, stderr)
	case "ops":
		var r opsResult
		if r, err = ops(ctx, *db); err == nil {
			err = printOps(stdout, []opsResult{r}, *asJSON)
		}
	case "redrive":
		var r redriveResult
		if r, err = redrive(ctx, *dir, *n, *rateFlag); err == nil {
			err = printRedrive(stdout, r, *asJSON)
		}
	case "all":
		err = all(ctx, *sizes, *dir, *n, *rateFlag, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "catalogbench: unknown subcommand %q: use build, ops, redrive or all\n", args[0])
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "catalogbench:", err)
		return 1
	}
	return 0
}

// all builds each size and measures it in a child process (so that the
// peak RSS reported is that size's alone), then runs the redrive.
func all(ctx context.Context, sizeList, dir string, n int, rate float64, stdout, stderr io.Writer) error {
	dir, cleanup, err := workDir(dir)
	if err != nil {
		return err
	}
	defer cleanup()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var results []opsResult
	for _, s := range strings.Split(sizeList, ",") {
		size, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || size <= 0 {
			return fmt.Errorf("-sizes: %q is not a positive number", s)
		}
		db := filepath.Join(dir, fmt.Sprintf("catalog-%d.db", size))
		fmt.Fprintf(stderr, "building %d entries in %s ...\n", size, db)
		if err := child(ctx, exe, stderr, nil, "build", "-db", db, "-entries", strconv.Itoa(size)); err != nil {
			return err
		}
		var out strings.Builder
		if err := child(ctx, exe, stderr, &out, "ops", "-db", db, "-json"); err != nil {
			return err
		}
		var rs []opsResult
		if err := json.Unmarshal([]byte(out.String()), &rs); err != nil {
			return fmt.Errorf("ops output: %w", err)
		}
		results = append(results, rs...)
		removeDB(db)
	}
	if err := printOps(stdout, results, false); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "redriving %d entries at %g/s ...\n", n, rate)
	r, err := redrive(ctx, dir, n, rate)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	return printRedrive(stdout, r, false)
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
