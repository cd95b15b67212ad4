// Command rabbitbench compares Lily's RabbitMQ transport with plain
// amqp091-go loops on the same broker in one run and prints a markdown
// table (docs/design.md §12):
//
//	cd bench && go run ./cmd/rabbitbench -n 20000 -rounds 3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lily-mq/lily/bench/rabbitbench"
)

func main() {
	var cfg rabbitbench.Config
	rounds := flag.Int("rounds", 3, "runs of each measurement; the median is reported")
	flag.StringVar(&cfg.URL, "url", "", "AMQP URL (default amqp://guest:guest@127.0.0.1:5672/)")
	flag.IntVar(&cfg.N, "n", 20000, "messages per run")
	flag.IntVar(&cfg.Prefetch, "prefetch", 256, "prefetch of both consumers")
	flag.IntVar(&cfg.Concurrency, "concurrency", 4, "Lily handler goroutines")
	flag.IntVar(&cfg.Consumers, "consumers", 4, "competing consumers of the plain-ack-competing and lily-ack-competing runs (one queue)")
	flag.IntVar(&cfg.Publishers, "publishers", 0, "Lily transport's publisher channels (0: the transport's default)")
	only := flag.String("only", "", "comma-separated measurements to run (plain-ack, lily-ack, plain-publish, plain-forward, lily-deadletter, plain-forward-evidence, plain-ack-competing, lily-ack-competing); default all")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (this process only, not the broker) to this file")
	memprofile := flag.String("memprofile", "", "write an allocation profile of the whole run (this process) to this file")
	flag.Parse()
	if *memprofile != "" {
		defer func() {
			f, err := os.Create(*memprofile)
			if err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	consumers := cfg.Consumers
	if consumers <= 0 {
		consumers = 4
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	all := []struct {
		id, name string
		fn       func(context.Context, rabbitbench.Config) (rabbitbench.Result, error)
	}{
		{"plain-ack", "plain consume/ack", rabbitbench.PlainAck},
		{"lily-ack", "Lily consumer, ack", rabbitbench.LilyAck},
		{"plain-publish", "plain publish with confirms", rabbitbench.PlainPublishConfirm},
		{"plain-forward", "plain forwarder (consume, publish+confirm, ack)", rabbitbench.PlainForwarder},
		{"lily-deadletter", "Lily consumer, dead-letter hand-off", rabbitbench.LilyDeadLetter},
		{"plain-forward-evidence", "plain forwarder writing Lily's evidence headers (context)", rabbitbench.PlainForwarderEvidence},
		{"plain-ack-competing", fmt.Sprintf("plain consume/ack, %d competing consumers", consumers), rabbitbench.PlainAckCompeting},
		{"lily-ack-competing", fmt.Sprintf("Lily consumer, ack, %d competing consumers", consumers), rabbitbench.LilyAckCompeting},
	}
	runs := all[:0:0]
	for _, r := range all {
		if *only == "" || slices.Contains(strings.Split(*only, ","), r.id) {
			runs = append(runs, r)
		}
	}
	median := map[string]float64{}
	// Interleave rounds so that drift on the machine affects all alike.
	results := map[string][]rabbitbench.Result{}
	for r := 0; r < *rounds; r++ {
		for _, run := range runs {
			res, err := run.fn(ctx, cfg)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", run.name, err)
				pprof.StopCPUProfile()
				os.Exit(1)
			}
			results[run.name] = append(results[run.name], res)
		}
	}
	fmt.Printf("| measurement | msg/s (median of %d) | runs (in round order) | client CPU µs/msg | broker CPU µs/msg | client allocs/msg |\n|---|---:|---|---:|---:|---:|\n", *rounds)
	for _, run := range runs {
		rs := results[run.name]
		var rate, client, broker, allocs []float64
		for _, r := range rs {
			c, b := r.CPUPerMessage()
			rate, client, broker = append(rate, r.PerSecond()), append(client, c), append(broker, b)
			allocs = append(allocs, float64(r.Allocs)/float64(r.N))
		}
		median[run.name] = med(rate)
		fmt.Printf("| %s | %.0f | %v | %.1f | %.1f | %.0f |\n", run.name, median[run.name], join(rate, "%.0f"), med(client), med(broker), med(allocs))
	}
	ratio := func(label, a, b, target string) {
		if median[a] == 0 || median[b] == 0 {
			return
		}
		var per []float64
		for i := range results[a] {
			per = append(per, results[a][i].PerSecond()/results[b][i].PerSecond())
		}
		fmt.Printf("%s = %.2f×%s (per round: %s)\n", label, median[a]/median[b], target, join(per, "%.2f"))
	}
	fmt.Println()
	ratio("happy path: Lily / plain consume-ack", "Lily consumer, ack", "plain consume/ack", " (target ≥ 0.9×)")
	ratio("hand-off: Lily dead-letter / plain publish with confirms", "Lily consumer, dead-letter hand-off", "plain publish with confirms", " (target ≥ 0.8×)")
	ratio("hand-off: Lily dead-letter / plain forwarder", "Lily consumer, dead-letter hand-off", "plain forwarder (consume, publish+confirm, ack)", "")
	ratio("hand-off: Lily dead-letter / plain forwarder with the same evidence headers", "Lily consumer, dead-letter hand-off", "plain forwarder writing Lily's evidence headers (context)", "")
	competing := runs[:0:0]
	for _, run := range runs {
		if strings.HasSuffix(run.id, "-competing") {
			competing = append(competing, run)
		}
	}
	if len(competing) == 2 {
		ratio("competing consumers: Lily / plain consume-ack", competing[1].name, competing[0].name, "")
	}
	for _, run := range competing {
		for i, r := range results[run.name] {
			if c := r.Competition; c != nil {
				fmt.Printf("%s, round %d: %d messages published, %d handled, %d event IDs handled more than once (must be 0)\n", run.name, i+1, c.Published, c.Handled, c.Duplicates)
			}
		}
	}
}

// med returns the median of v (the upper one of an even count).
func med(v []float64) float64 {
	v = slices.Clone(v)
	sort.Float64s(v)
	return v[len(v)/2]
}

// join formats each value of v with format, comma-separated.
func join(v []float64, format string) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, ", ")
}
