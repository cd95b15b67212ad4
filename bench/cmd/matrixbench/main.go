// Command matrixbench measures, in one run, Lily's consumption by
// transport (the SQLite store, RabbitMQ, Kafka on kfake) × catalog (none,
// a SQLite file, PostgreSQL) × consumer processes, next to a bare
// ceiling per catalog × processes: the rows the accounting writes, written
// with plain batched SQL (issue 29, item 3).
//
//	cd bench && go run ./cmd/matrixbench -n 20000 -procs 1,2,4
//
// Each cell prefills n messages (through the accounted publisher when it
// has a catalog), starts its consumer processes — this binary again, each
// a lily.Consumer over ledger.Account(transport, catalog) or the
// transport alone — and times from their start to the last ack. CPU per
// message is read from /proc: the consumer processes', every PostgreSQL
// process's, and the broker's (the RabbitMQ node; the kfake process,
// which this binary starts for the Kafka cells). A cell that does not
// conserve (every message acked exactly once, nothing in flight, the
// ledger at accepted = acked = n) is reported as failed, without numbers.
// docs/benchmarks.md describes the cells and the ceiling.
//
// It needs RabbitMQ (127.0.0.1:5672) and PostgreSQL (127.0.0.1:5432,
// trust, database test) for the cells that use them; each cell makes a
// queue, a schema and a directory of its own and removes them. It writes
// a markdown table (-out, default standard output) and exits 1 when a
// cell failed.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
)

type options struct {
	n, batch, body, kafkaPort int
	procs                     []int
	transports, catalogs      []string
	pg, amqp, out             string
	ceiling                   bool
	timeout                   time.Duration
	admin                     *sql.DB
}

func main() {
	s, isChild, err := readSpec()
	if err != nil {
		fmt.Fprintln(os.Stderr, "matrixbench:", err)
		os.Exit(2)
	}
	if isChild {
		os.Exit(child(s))
	}
	os.Exit(run())
}

func run() int {
	var o options
	var procs, transports, catalogs string
	flag.IntVar(&o.n, "n", 20000, "messages per cell")
	flag.StringVar(&procs, "procs", "1,2,4", "consumer (and ceiling writer) process counts")
	flag.StringVar(&transports, "transports", "sqlite,rabbitmq,kafka", "transports: sqlite, rabbitmq, kafka")
	flag.StringVar(&catalogs, "catalogs", "none,sqlite,postgres", "catalogs: none, sqlite (a file), postgres")
	flag.BoolVar(&o.ceiling, "ceiling", true, "run the bare-ceiling cells (per catalog other than none, per process count)")
	flag.IntVar(&o.batch, "batch", prefetch, "the ceiling's keys per round trip (the consumers' prefetch: the largest settle batch they form)")
	flag.IntVar(&o.body, "body", 512, "message body size, bytes")
	flag.StringVar(&o.pg, "pg", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL server (a schema per cell is made)")
	flag.StringVar(&o.amqp, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ")
	flag.IntVar(&o.kafkaPort, "kafka-port", 39092, "port of the kfake broker process of the Kafka cells, on 127.0.0.1")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "longest a cell may take to ack every message")
	flag.StringVar(&o.out, "out", "-", "where the markdown table goes (- for standard output)")
	flag.Parse()
	var err error
	if o.procs, err = parseProcs(procs); err == nil {
		o.transports, err = parseList("-transports", transports, trSQLite, trRabbitMQ, trKafka)
	}
	if err == nil {
		o.catalogs, err = parseList("-catalogs", catalogs, catNone, catSQLite, catPostgres)
	}
	if err != nil || o.n <= 0 || o.batch <= 0 {
		fmt.Fprintln(os.Stderr, "matrixbench:", errors.Join(err, errors.New("-n and -batch must be positive")))
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if slices.Contains(o.catalogs, catPostgres) {
		if o.admin, err = sql.Open("pgx", o.pg); err != nil {
			fmt.Fprintln(os.Stderr, "matrixbench:", err)
			return 2
		}
		defer o.admin.Close()
	}
	started, load0 := time.Now().UTC(), loadavg()
	var results []result
	add := func(r result) {
		results = append(results, r)
		status := "ok"
		if r.err != nil {
			status = "FAILED: " + r.err.Error()
		}
		fmt.Fprintf(os.Stderr, "matrixbench: %s / %s / %d: %.0f msg/s, %s\n", r.transport, r.catalog, r.procs, r.rate, status)
	}
	for _, tr := range o.transports {
		for _, cat := range o.catalogs {
			if tr == trSQLite && cat != catSQLite {
				continue // the store's ledger is its own file (see the note under the table)
			}
			for _, p := range o.procs {
				add(runLily(ctx, &o, tr, cat, p))
			}
		}
	}
	if o.ceiling {
		for _, cat := range o.catalogs {
			if cat == catNone {
				continue
			}
			for _, p := range o.procs {
				add(runCeiling(ctx, &o, cat, p))
			}
		}
	}
	w := io.Writer(os.Stdout)
	if o.out != "-" {
		f, err := os.Create(o.out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "matrixbench:", err)
			return 2
		}
		defer f.Close()
		w = f
	}
	writeTable(w, &o, results, started, load0, loadavg())
	for _, r := range results {
		if r.err != nil {
			return 1
		}
	}
	return 0
}

func parseProcs(v string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > partitions {
			return nil, fmt.Errorf("-procs %q: %q is not a process count from 1 to %d (the Kafka topics' partitions)", v, f, partitions)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseList(flagName, v string, allowed ...string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allowed, f) {
			return nil, fmt.Errorf("%s %q: unknown %q (want a comma-separated list of %s)", flagName, v, f, strings.Join(allowed, ", "))
		}
		out = append(out, f)
	}
	return out, nil
}

// loadavg is /proc/loadavg's one-minute figure ("?" without it).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// commit is the checkout's commit ("" outside a git checkout).
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// writeTable writes the results as a markdown table: each Lily cell with
// its rate against the same transport without a catalog and against the
// ceiling on its catalog at the same process count, and its PostgreSQL
// CPU per message against the ceiling's.
func writeTable(w io.Writer, o *options, rs []result, started time.Time, load0, load1 string) {
	find := func(tr, cat string, p int) *result {
		for i := range rs {
			if rs[i].transport == tr && rs[i].catalog == cat && rs[i].procs == p && rs[i].err == nil {
				return &rs[i]
			}
		}
		return nil
	}
	fmt.Fprintf(w, "matrixbench -n %d: started %s at %s, load average %s at the start and %s at the end\n\n",
		o.n, started.Format("2006-01-02 15:04 UTC"), commit(), load0, load1)
	fmt.Fprintln(w, "| transport | catalog | processes | msg/s | CPU µs/msg: client | PostgreSQL | broker | msg/s ÷ no catalog | msg/s ÷ ceiling | PostgreSQL CPU ÷ ceiling's |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	dash := "—"
	for _, r := range rs {
		tr, cat := r.transport, r.catalog
		if tr == "ceiling" {
			tr = "bare ceiling (plain batched SQL)"
		}
		if r.transport == trSQLite {
			cat = "the store's own file"
		}
		if r.err != nil {
			fmt.Fprintf(w, "| %s | %s | %d | **failed**: %s | | | | | | |\n", tr, cat, r.procs, strings.ReplaceAll(r.err.Error(), "|", "/"))
			continue
		}
		broker, vsNone, vsCeil, pgVsCeil := dash, dash, dash, dash
		if r.hasBroker {
			broker = fmt.Sprintf("%.1f", r.broker)
		}
		if r.transport != "ceiling" && r.transport != trSQLite && r.catalog != catNone {
			if n := find(r.transport, catNone, r.procs); n != nil {
				vsNone = fmt.Sprintf("%.2f", r.rate/n.rate)
			}
			if c := find("ceiling", r.catalog, r.procs); c != nil {
				vsCeil = fmt.Sprintf("%.2f", r.rate/c.rate)
				if r.catalog == catPostgres && c.pg > 0 {
					pgVsCeil = fmt.Sprintf("%.2f", r.pg/c.pg)
				}
			}
		}
		fmt.Fprintf(w, "| %s | %s | %d | %.0f | %.1f | %.1f | %s | %s | %s | %s |\n", tr, cat, r.procs, r.rate, r.client, r.pg, broker, vsNone, vsCeil, pgVsCeil)
	}
	fmt.Fprintln(w, "\nThe SQLite transport keeps its ledger in its own file, in the transactions that move its messages: it has no cell without a catalog or with PostgreSQL. A ceiling's client CPU is its writer processes'.")
}
