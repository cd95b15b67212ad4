package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/redrive"
)

// OrderingResult is the result of 'lily demo --scenario ordering'.
type OrderingResult struct {
	Scenario  string `json:"scenario"`
	Transport string `json:"transport"`
	Queue     string `json:"queue"`
	Ordering  string `json:"ordering"`
	Keys      int    `json:"keys"`
	Published int    `json:"published"`
	// PoisonedKey is the key whose posting failed; Head its event ID.
	PoisonedKey string `json:"poisoned_key"`
	Head        string `json:"head"`
	// OtherKeysDone is how many of the other keys were processed in full
	// while the poisoned key waited; ParkedWhileHeld how many of its
	// postings waited behind its head.
	OtherKeysDone   int   `json:"other_keys_done_while_held"`
	ParkedWhileHeld int64 `json:"parked_while_held"`
	// UnparkAction is what 'lily dlq unpark' did (redrive_head).
	UnparkAction string `json:"unpark_action"`
	// PoisonedKeyOrder is the order in which the poisoned key's postings
	// were processed; InOrder is set when every key's postings were
	// processed in publish order.
	PoisonedKeyOrder []int `json:"poisoned_key_order"`
	InOrder          bool  `json:"in_order"`
	Lost             int64 `json:"lost"`
}

// The ordering scenario's workload: orderingKeys accounts with
// orderingPerKey postings each, interleaved; posting orderingPoison of
// account orderingBadKey fails permanently until the fix is deployed.
const (
	orderingKeys   = 8
	orderingPerKey = 10
	orderingBadKey = "acct-3"
	orderingPoison = 3
)

// posting is one message of the ordering scenario.
type posting struct {
	Account string `json:"account"`
	Seq     int    `json:"seq"`
}

// runOrderingScenario publishes interleaved postings of several accounts
// to a queue with ordering park, lets one posting fail, shows that its
// account's later postings wait (parked, in order) while every other
// account is processed, deploys the fix, unparks the account and checks
// that every account's postings were processed in publish order.
func runOrderingScenario(ctx context.Context, conn connection, queue, db string) (OrderingResult, error) {
	qc := lily.QueueConfig{Name: queue, Transport: conn.kind, Owner: "team-ledger", Ordering: lily.OrderingPark,
		RetryAttempts: 2, RetryBackoffMillis: new(int64(50)), MaxRetryBackoffMillis: new(int64(100))}.WithDefaults()
	out := OrderingResult{Scenario: "ordering", Transport: conn.kind, Queue: queue, Ordering: qc.Ordering,
		Keys: orderingKeys, PoisonedKey: orderingBadKey}
	b, err := openBackend(ctx, conn, db, qc)
	if err != nil {
		return out, err
	}
	defer b.Close()
	if err := b.declare(ctx); err != nil {
		return out, err
	}
	var msgs []lily.Message
	for seq := range orderingPerKey {
		for k := range orderingKeys {
			p := posting{Account: fmt.Sprintf("acct-%d", k), Seq: seq}
			body, _ := json.Marshal(p)
			msgs = append(msgs, lily.Message{Key: p.Account, Type: "ledger.posting", Body: body})
		}
	}
	if err := lily.Publish(ctx, b.tr, qc.Name, msgs); err != nil {
		return out, err
	}
	out.Published = len(msgs)

	var mu sync.Mutex
	fixed := false
	done := map[string][]int{}
	processed := func(key string) []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(done[key])
	}
	c, err := lily.NewConsumer(b.tr, lily.HandlerFunc(func(_ context.Context, d *lily.Delivery) error {
		var p posting
		if err := json.Unmarshal(d.Body, &p); err != nil {
			return lily.Permanent(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if p.Account == orderingBadKey && p.Seq == orderingPoison && !fixed {
			return lily.Permanent(errors.New("posting debits a frozen account"))
		}
		if !slices.Contains(done[p.Account], p.Seq) { // a redelivered duplicate is processed once
			done[p.Account] = append(done[p.Account], p.Seq)
		}
		return nil
	}), lily.ConsumerOptions{Queue: qc, Concurrency: 4, Prefetch: 64, ReceiveWait: 20 * time.Millisecond,
		Keys: redrive.NewKeys(b.cat), KeyPoll: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return out, err
	}
	stop := runInBackground(ctx, c)
	defer stop()

	others := func() int {
		n := 0
		for k := range orderingKeys {
			if key := fmt.Sprintf("acct-%d", k); key != orderingBadKey && len(processed(key)) == orderingPerKey {
				n++
			}
		}
		return n
	}
	var held redrive.HeldKey
	if err := waitUntil(ctx, "the other accounts processed and "+orderingBadKey+" parked", func() (bool, error) {
		if err := b.finish(ctx); err != nil { // a broker's dead letters into the catalog
			return false, err
		}
		keys, err := redrive.NewKeys(b.cat).HeldKeys(ctx, qc.Name)
		if err != nil || len(keys) != 1 {
			return false, err
		}
		held = keys[0]
		return others() == orderingKeys-1 && held.Parked == orderingPerKey-orderingPoison-1 && held.Head != nil, nil
	}); err != nil {
		return out, err
	}
	out.OtherKeysDone, out.ParkedWhileHeld, out.Head = others(), held.Parked, held.HeadEventID

	mu.Lock()
	fixed = true // the fix is deployed
	mu.Unlock()
	res, err := redrive.NewKeys(b.cat).Unpark(ctx, redrive.UnparkParams{Queue: qc.Name, Key: orderingBadKey, Actor: "demo",
		Target: func(context.Context, string) (redrive.Publisher, error) { return b.tr, nil }})
	if err != nil {
		return out, err
	}
	out.UnparkAction = res.Action
	if err := waitUntil(ctx, orderingBadKey+" unparked and processed", func() (bool, error) {
		keys, err := redrive.NewKeys(b.cat).HeldKeys(ctx, qc.Name)
		return len(keys) == 0 && len(processed(orderingBadKey)) == orderingPerKey, err
	}); err != nil {
		return out, err
	}
	if err := stop(); err != nil {
		return out, err
	}
	out.PoisonedKeyOrder = processed(orderingBadKey)
	out.InOrder = true
	for k := range orderingKeys {
		got := processed(fmt.Sprintf("acct-%d", k))
		out.InOrder = out.InOrder && slices.IsSorted(got) && len(got) == orderingPerKey
	}
	if out.Lost, err = b.lost(ctx, qc.Name); err != nil {
		return out, err
	}
	return out, nil
}

// runInBackground runs c until stop is called; stop cancels it, waits
// for it to return and returns Run's error (again on a later call).
func runInBackground(ctx context.Context, c *lily.Consumer) (stop func() error) {
	runCtx, cancel := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(runCtx) }()
	return sync.OnceValue(func() error {
		cancel()
		return <-runErr
	})
}

// waitUntil polls cond every 20ms for up to a minute.
func waitUntil(ctx context.Context, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(time.Minute)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("demo ordering: gave up waiting for %s", what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// printOrderingScenario prints the scenario's result for a reader.
func printOrderingScenario(w io.Writer, o OrderingResult) {
	fmt.Fprintf(w, "Ordering scenario on %s, ordering = %q: %d accounts × %d postings, interleaved (%d messages)\n",
		o.Transport, o.Ordering, o.Keys, o.Published/o.Keys, o.Published)
	fmt.Fprintf(w, "  posting %d of %s failed permanently: the account is parked (head %s)\n", orderingPoison, o.PoisonedKey, o.Head)
	fmt.Fprintf(w, "  while it waited: %d postings of %s parked in order; the other %d accounts processed in full\n",
		o.ParkedWhileHeld, o.PoisonedKey, o.OtherKeysDone)
	fmt.Fprintf(w, "  the fix is deployed; lily dlq unpark --queue %s --key %s: %s, then the parked postings one at a time\n",
		o.Queue, o.PoisonedKey, o.UnparkAction)
	fmt.Fprintf(w, "  %s processed in order %v\n", o.PoisonedKey, o.PoisonedKeyOrder)
	verdict := "every account's postings were processed in publish order"
	if !o.InOrder {
		verdict = "OUT OF ORDER: some account's postings were processed out of publish order"
	}
	fmt.Fprintf(w, "  %s; lost %d\n", verdict, o.Lost)
}

// runOrderingDemo runs 'lily demo --scenario ordering'.
func runOrderingDemo(ctx context.Context, f Flags, stdout io.Writer) error {
	path, err := scenarioDB(f, "ordering")
	if err != nil {
		return err
	}
	out, err := runOrderingScenario(ctx, f.conn(), scenarioQueue(f, "ledger.postings"), path)
	if err != nil {
		return err
	}
	if err := printScenario(stdout, f.asJSON, out, printOrderingScenario); err != nil {
		return err
	}
	if out.Lost != 0 || !out.InOrder {
		return &ExitError{Code: 1, Msg: fmt.Sprintf("demo ordering: lost %d, in order %v", out.Lost, out.InOrder)}
	}
	return nil
}
