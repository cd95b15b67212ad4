// Command sqlitebench measures, in one run on one machine, the publish +
// consume + ack round trip of N messages through Lily's SQLite transport
// (full runtime and raw), goqite (Queue API and jobs runner) with the same
// durability, and a bare-SQL ceiling, and prints a markdown table.
//
//	cd bench && go run ./cmd/sqlitebench -n 100000
//
// Every system runs on a fresh temporary database; with -runs R each is run
// R times (interleaved) and the median is reported. Conservation is checked
// after every run (all N consumed exactly once, acked, the queue empty); a
// failure exits non-zero.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/lily-mq/lily/bench"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sqlitebench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c bench.Config
	fs.IntVar(&c.N, "n", 100000, "messages per run")
	fs.IntVar(&c.BodySize, "body", 512, "body size in bytes")
	fs.IntVar(&c.PublishBatch, "publish-batch", 100, "messages per publish call / transaction (Lily runtime, goqite)")
	fs.IntVar(&c.Batch, "batch", 100, "raw Lily receive/settle batch and bare-SQL transaction size")
	fs.IntVar(&c.Concurrency, "concurrency", 4, "consumer parallelism: Lily handler goroutines, goqite receivers, goqite jobs limit")
	fs.IntVar(&c.Prefetch, "prefetch", 1024, "Lily consumer prefetch window")
	fs.IntVar(&c.SettleBatch, "settle-batch", 512, "Lily consumer settle batch (group commit)")
	fs.DurationVar(&c.GoqitePoll, "goqite-poll", time.Millisecond, "goqite ReceiveAndWait / jobs runner poll interval")
	fs.StringVar(&c.Dir, "dir", "", "directory for the temporary databases (default: the system temp dir)")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Minute, "limit of one run")
	runs := fs.Int("runs", 1, "runs per system; the median is reported")
	only := fs.String("only", "", "comma-separated systems to run (lily-runtime, lily-raw, goqite, goqite-jobs, bare-sql); default all")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	selected := bench.Runners()
	if *only != "" {
		want := strings.Split(*only, ",")
		selected = slices.DeleteFunc(selected, func(r bench.Runner) bool { return !slices.Contains(want, r.Name) })
		if len(selected) == 0 {
			fmt.Fprintf(stderr, "sqlitebench: -only %q names no system\n", *only)
			return 2
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()

	results := make(map[string][]bench.Result)
	for i := range max(*runs, 1) {
		for _, r := range selected {
			runtime.GC()
			res, err := r.Run(ctx, c)
			if err != nil {
				fmt.Fprintf(stderr, "sqlitebench: %s run %d: FAILED: %v\n", r.Name, i+1, err)
				return 1
			}
			fmt.Fprintf(stderr, "run %d %-13s %8.0f msg/s  (%v)\n", i+1, r.Name, res.PerSecond(), res.Elapsed.Round(time.Millisecond))
			results[r.Name] = append(results[r.Name], res)
		}
	}

	c = c.WithDefaults()
	fmt.Fprintf(stdout, "N = %d messages of %d bytes per run, %d run(s) per system, GOMAXPROCS %d, %s\n\n",
		c.N, c.BodySize, max(*runs, 1), runtime.GOMAXPROCS(0), runtime.Version())
	fmt.Fprintln(stdout, "| system | msg/s (median) | runs (msg/s) | how |")
	fmt.Fprintln(stdout, "|---|---:|---|---|")
	med := map[string]float64{}
	for _, r := range selected {
		rs := results[r.Name]
		rates := make([]float64, len(rs))
		for i, x := range rs {
			rates[i] = x.PerSecond()
		}
		med[r.Name] = median(rates)
		all := make([]string, len(rates))
		for i, x := range rates {
			all[i] = fmt.Sprintf("%.0f", x)
		}
		fmt.Fprintf(stdout, "| %s | %.0f | %s | %s |\n", rs[0].Name, med[r.Name], strings.Join(all, ", "), rs[0].Notes)
	}
	fmt.Fprintln(stdout)
	if l, ok := med["lily-runtime"]; ok {
		for _, g := range []string{"goqite", "goqite-jobs"} {
			if x, ok := med[g]; ok && x > 0 {
				fmt.Fprintf(stdout, "Lily runtime / %s: %.2f×\n", g, l/x)
			}
		}
		if x, ok := med["bare-sql"]; ok && x > 0 {
			fmt.Fprintf(stdout, "Lily runtime / bare SQL ceiling: %.2f\n", l/x)
		}
	}
	if l, ok := med["lily-raw"]; ok {
		if x, ok := med["bare-sql"]; ok && x > 0 {
			fmt.Fprintf(stdout, "Lily raw transport / bare SQL ceiling: %.2f\n", l/x)
		}
	}
	return 0
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
