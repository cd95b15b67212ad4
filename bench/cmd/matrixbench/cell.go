package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/bench/internal/fleet"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
)

// result is one row of the table.
type result struct {
	transport, catalog string // transport "ceiling" for a bare-ceiling cell
	procs              int
	rate               float64 // messages per second
	client, pg, broker float64 // CPU µs per message
	hasBroker          bool
	err                error // the cell failed (not conserved, or did not finish)
}

// cell is the setup of one cell: a directory, a queue, perhaps a schema
// and a Kafka broker, undone by cleanup.
type cell struct {
	o       *options
	s       spec
	dir     string
	schema  string
	broker  int // the pid of a Kafka cell's kfake process
	cleanup []func()
}

func newCell(ctx context.Context, o *options, tr, cat string, procs int) (*cell, error) {
	c := &cell{o: o}
	dir, err := os.MkdirTemp("", "matrixbench-")
	if err != nil {
		return nil, err
	}
	c.dir = dir
	c.cleanup = append(c.cleanup, func() { os.RemoveAll(dir) })
	tag := fmt.Sprintf("%08x", rand.Uint32())
	c.s = spec{Transport: tr, Catalog: cat, Queue: "matrix" + tag + ".orders", AMQP: o.amqp, N: o.n, Procs: procs,
		Batch: o.batch, BodySize: o.body, KafkaPort: o.kafkaPort}
	if tr == trSQLite {
		c.s.Store = filepath.Join(dir, "store.db")
	}
	switch cat {
	case catSQLite:
		c.s.CatalogURL = filepath.Join(dir, "catalog.db")
	case catPostgres:
		c.schema = "matrixbench_" + tag
		if c.s.CatalogURL, err = fleet.CreateSchema(ctx, o.admin, o.pg, c.schema); err != nil {
			c.close()
			return nil, err
		}
		c.cleanup = append(c.cleanup, func() { fleet.DropSchema(context.Background(), o.admin, c.schema) })
	}
	if tr == trKafka {
		if err := c.startKafka(ctx); err != nil {
			c.close()
			return nil, err
		}
	}
	return c, nil
}

// startKafka starts the cell's kfake broker in a process of its own and
// waits until it listens.
func (c *cell) startKafka(ctx context.Context) error {
	s := c.s
	s.Role = roleKafka
	cmd, err := fleet.Start(s.env())
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the kfake broker: %w", err)
	}
	c.cleanup = append(c.cleanup, func() { cmd.Process.Kill(); cmd.Wait() })
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
				listening <- addr
			}
		}
		close(listening)
	}()
	select {
	case addr, ok := <-listening:
		if !ok {
			return errors.New("the kfake broker exited before it listened (see its error above)")
		}
		c.s.Kafka = addr
		c.broker = cmd.Process.Pid
		return nil
	case <-time.After(time.Minute):
		return errors.New("the kfake broker did not listen within a minute")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *cell) close() {
	for i := len(c.cleanup) - 1; i >= 0; i-- {
		c.cleanup[i]()
	}
}

// brokerCPU reads the cell's broker process: the RabbitMQ node, the kfake
// process; none for the SQLite store (it runs inside the consumers).
func (c *cell) brokerCPU() fleet.Broker {
	switch c.s.Transport {
	case trRabbitMQ:
		return fleet.RabbitMQ
	case trKafka:
		return fleet.PIDs(c.broker)
	}
	return nil
}

// runLily runs a Lily cell: prefill n messages, then procs consumer
// processes consume them; the clock runs from their start to the last
// ack; then the checks.
func runLily(ctx context.Context, o *options, tr, cat string, procs int) (res result) {
	res = result{transport: tr, catalog: cat, procs: procs, hasBroker: tr != trSQLite}
	c, err := newCell(ctx, o, tr, cat, procs)
	if err != nil {
		res.err = err
		return res
	}
	defer c.close()
	b, err := openBackend(ctx, c.s)
	if err != nil {
		res.err = err
		return res
	}
	defer b.close()
	defer remove(context.Background(), b, c.s)
	if err := declare(ctx, b, c.s); err != nil {
		res.err = err
		return res
	}
	for i := 0; i < o.n; i += 500 {
		msgs := make([]lily.Message, 0, 500)
		for j := i; j < min(i+500, o.n); j++ {
			msgs = append(msgs, lily.Message{Body: body(j, o.body)})
		}
		if err := lily.Publish(ctx, b.tr, c.s.Queue, msgs); err != nil {
			res.err = fmt.Errorf("prefill: %w", err)
			return res
		}
	}
	specs := c.specs(roleConsumer)
	for i := range specs {
		specs[i].IDs = filepath.Join(c.dir, fmt.Sprintf("ids.%d", i))
	}
	g, err := measure(ctx, o, specs, c.brokerCPU(), &res)
	if err != nil {
		res.err = err
		return res
	}
	res.err = checkLily(ctx, b, c.s, g, specs)
	return res
}

// checkLily verifies a Lily cell's conservation: every message acked
// exactly once across the processes (their hooks, their event IDs),
// nothing else settled, nothing left in the transport, and the ledger —
// the catalog's, or the SQLite store's own — at accepted = acked = n.
func checkLily(ctx context.Context, b *backend, s spec, g *group, specs []spec) error {
	acked, other := g.totals()
	if acked != int64(s.N) || other != 0 {
		return fmt.Errorf("%d acked and %d settled otherwise, want %d and 0", acked, other, s.N)
	}
	seen := make(map[string]bool, s.N)
	for _, cs := range specs {
		raw, err := os.ReadFile(cs.IDs)
		if err != nil {
			return fmt.Errorf("the acked event IDs of consumer %d: %w", cs.Index, err)
		}
		for _, id := range strings.Fields(string(raw)) {
			if seen[id] {
				return fmt.Errorf("event ID %s acked twice", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != s.N {
		return fmt.Errorf("%d distinct event IDs acked, want %d", len(seen), s.N)
	}
	inflight, _ := b.raw.(transport.InFlightCounter)
	// The transport's in-flight count can lag the acks by a moment (a
	// Kafka offset commit, the broker's bookkeeping): wait for it.
	var last string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var ok bool
		if b.cat != nil {
			r, err := ledgerRow(ctx, b.cat, inflight, s.Queue)
			ok = err == nil && r.Accepted == int64(s.N) && r.Acked == int64(s.N) && r.InFlight == 0 && r.Balanced()
			last = fmt.Sprintf("ledger %+v (%v)", r, err)
		} else {
			n, err := inflight.InFlight(ctx, s.Queue)
			ok = err == nil && n == 0
			last = fmt.Sprintf("in flight %d (%v)", n, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not settled a minute after the last ack: %s; want accepted = acked = %d, nothing in flight", last, s.N)
		}
	}
}

// ledgerRow is queue's ledger row (inflight nil: nothing in flight).
func ledgerRow(ctx context.Context, cat *catalog.Store, inflight transport.InFlightCounter, queue string) (ledger.Row, error) {
	rows, err := ledger.New(cat).Rows(ctx, inflight)
	if err != nil {
		return ledger.Row{}, err
	}
	for _, r := range rows {
		if r.Queue == queue {
			return r, nil
		}
	}
	return ledger.Row{}, fmt.Errorf("queue %s not in the ledger", queue)
}

// runCeiling runs a bare-ceiling cell on catalog cat: prefill the
// accepted rows, then procs writer processes turn them acked; the clock
// runs from their start to the last batch committed.
func runCeiling(ctx context.Context, o *options, cat string, procs int) (res result) {
	res = result{transport: "ceiling", catalog: cat, procs: procs}
	c, err := newCell(ctx, o, "ceiling", cat, procs)
	if err != nil {
		res.err = err
		return res
	}
	defer c.close()
	store, err := catalog.Open(ctx, c.s.CatalogURL)
	if err != nil {
		res.err = err
		return res
	}
	defer store.Close()
	if err := prefillCeiling(ctx, store, c.s); err != nil {
		res.err = err
		return res
	}
	if _, err := measure(ctx, o, c.specs(roleCeiling), nil, &res); err != nil {
		res.err = err
		return res
	}
	res.err = checkCeiling(ctx, store, c.s)
	return res
}

// specs are the cell's process specs: procs of them in role, numbered.
func (c *cell) specs(role string) []spec {
	specs := make([]spec, c.s.Procs)
	for i := range specs {
		specs[i] = c.s
		specs[i].Role, specs[i].Index = role, i
	}
	return specs
}

// measure starts the processes of specs, waits until they acked every
// message and stops them; it fills res's rate (from their start to the
// last ack) and CPU per message (read before their start and at the last
// ack, while they still run), and returns the stopped group.
func measure(ctx context.Context, o *options, specs []spec, broker fleet.Broker, res *result) (*group, error) {
	cpu0 := fleet.ReadCPU(nil, broker)
	start := time.Now()
	g, err := startGroup(specs)
	if err != nil {
		return nil, err
	}
	werr := g.wait(ctx, int64(o.n), o.timeout)
	elapsed := time.Since(start)
	cpu1 := fleet.ReadCPU(g.cmds, broker)
	if err := errors.Join(werr, g.stop()); err != nil {
		return nil, err
	}
	res.rate = float64(o.n) / elapsed.Seconds()
	res.client, res.pg, res.broker = cpu1.PerMessage(cpu0, o.n)
	return g, nil
}
