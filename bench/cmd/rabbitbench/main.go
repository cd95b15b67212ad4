// Command rabbitbench compares Lily's RabbitMQ transport with plain
// amqp091-go loops on the same broker in one run and prints a markdown
// table (DESIGN §12):
//
//	cd bench && go run ./cmd/rabbitbench -n 20000 -rounds 3
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
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
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	runs := []struct {
		name string
		fn   func(context.Context, rabbitbench.Config) (rabbitbench.Result, error)
	}{
		{"plain consume/ack", rabbitbench.PlainAck},
		{"Lily consumer, ack", rabbitbench.LilyAck},
		{"plain publish with confirms", rabbitbench.PlainPublishConfirm},
		{"plain forwarder (consume, publish+confirm, ack)", rabbitbench.PlainForwarder},
		{"Lily consumer, dead-letter hand-off", rabbitbench.LilyDeadLetter},
	}
	median := map[string]float64{}
	// Interleave rounds so that drift on the machine affects all alike.
	all := map[string][]float64{}
	for r := 0; r < *rounds; r++ {
		for _, run := range runs {
			res, err := run.fn(ctx, cfg)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", run.name, err)
				os.Exit(1)
			}
			all[run.name] = append(all[run.name], res.PerSecond())
		}
	}
	fmt.Printf("| measurement | msg/s (median of %d) | runs |\n|---|---:|---|\n", *rounds)
	for _, run := range runs {
		v := all[run.name]
		sort.Float64s(v)
		median[run.name] = v[len(v)/2]
		fmt.Printf("| %s | %.0f | %v |\n", run.name, median[run.name], fmtAll(v))
	}
	fmt.Printf("\nhappy path: Lily / plain consume-ack = %.2f× (target ≥ 0.9×)\n",
		median["Lily consumer, ack"]/median["plain consume/ack"])
	fmt.Printf("hand-off: Lily dead-letter / plain publish with confirms = %.2f× (target ≥ 0.8×)\n",
		median["Lily consumer, dead-letter hand-off"]/median["plain publish with confirms"])
	fmt.Printf("hand-off: Lily dead-letter / plain forwarder = %.2f×\n",
		median["Lily consumer, dead-letter hand-off"]/median["plain forwarder (consume, publish+confirm, ack)"])
}

func fmtAll(v []float64) string {
	s := ""
	for i, x := range v {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%.0f", x)
	}
	return s
}
