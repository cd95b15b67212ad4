package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/plan"
	"github.com/lily-mq/lily/redrive/rules"
)

// outageFlags are the parameters of 'lily demo --scenario outage'.
type outageFlags struct {
	conn      connection
	queue, db string
	rate      float64
	outage    time.Duration
	breaker   bool
}

// OutageResult is the result of the outage scenario.
type OutageResult struct {
	Scenario              string  `json:"scenario"`
	Transport             string  `json:"transport"`
	Queue                 string  `json:"queue"`
	Breaker               bool    `json:"breaker"`
	RatePerS              float64 `json:"rate"`
	OutageS               float64 `json:"outage_s"`
	RetrySpanS            float64 `json:"retry_span_s"`
	Published             int64   `json:"published"`
	PredictedDeadLettered float64 `json:"predicted_dead_lettered"`
	DeadLettered          int64   `json:"dead_lettered"`
	Acked                 int64   `json:"acked"`
	Held                  int64   `json:"held"`
	MaxLag                int64   `json:"max_lag"`
	BreakerOpened         int64   `json:"breaker_opened"`
	Lost                  int64   `json:"lost"`
}

// The outage scenario's compressed timeline and retry schedule: three
// retries 100, 200, 400 ms apart (span 700 ms), the dependency down from
// outageLead for the outage, traffic until the retry span after it.
const (
	outageLead     = 500 * time.Millisecond
	outageBackoff  = 100
	outageMaxDelay = 400
	outageAttempts = 3
)

// outageQueueConfig is the scenario's queue: the breaker opens within a
// fraction of the retry span and probes every 200 ms.
func outageQueueConfig(name, kind string, rate float64, breaker bool) lily.QueueConfig {
	return lily.QueueConfig{
		Name: name, Transport: kind, Owner: "team-checkout",
		RetryAttempts: outageAttempts, RetryBackoffMillis: new(int64(outageBackoff)), MaxRetryBackoffMillis: new(int64(outageMaxDelay)),
		Breaker: &breaker, BreakerMinRequests: new(max(3, int(rate/50))), BreakerWindowMillis: new(int64(200)), BreakerCooldownMillis: new(int64(200)),
	}.WithDefaults()
}

// runOutageScenario runs healthy traffic at a steady rate against a
// dependency that fails every call for the outage, with a retry span
// shorter than the outage, and compares the dead letters with the
// planner's prediction R · max(0, outage − span).
func runOutageScenario(ctx context.Context, f outageFlags, stdout io.Writer) (OutageResult, error) {
	var out OutageResult
	switch {
	case f.rate <= 0 || f.rate > 5000:
		return out, usagef("--rate %g: must be in (0, 5000] messages per second", f.rate)
	case f.outage <= 0 || f.outage > 10*time.Minute:
		return out, usagef("--outage %s: must be in (0, 10m]", f.outage)
	}
	qc := outageQueueConfig(f.queue, f.conn.kind, f.rate, f.breaker)
	sched, err := plan.Backoff(outageAttempts+1, outageBackoff, outageMaxDelay)
	if err != nil {
		return out, err
	}
	pred, err := plan.Outage(plan.OutageParams{Rate: f.rate, Outage: f.outage, Schedule: sched})
	if err != nil {
		return out, err
	}
	b, err := openBackend(ctx, f.conn, f.db, qc)
	if err != nil {
		return out, err
	}
	defer b.Close()
	if err := b.declare(ctx); err != nil {
		return out, err
	}
	out = OutageResult{Scenario: "outage", Transport: f.conn.kind, Queue: qc.Name, Breaker: f.breaker, RatePerS: f.rate,
		OutageS: f.outage.Seconds(), RetrySpanS: pred.RetrySpanS, PredictedDeadLettered: pred.DeadLettered}

	var published, acked, dead, held, opened atomic.Int64
	firstAck, firstAckOnce := make(chan struct{}), sync.Once{}
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		switch e.Kind {
		case lily.EventAcked:
			acked.Add(1)
			firstAckOnce.Do(func() { close(firstAck) })
		case lily.EventDeadLettered:
			dead.Add(1)
		case lily.EventHeld:
			held.Add(1)
		case lily.EventBreaker:
			if e.Breaker == lily.BreakerOpen {
				opened.Add(1)
			}
		}
	})
	// The dependency's outage window, set once the consumer is warm: until
	// then every call succeeds.
	var window atomic.Pointer[[2]time.Time]
	errDown := errors.New("payment service unavailable")
	c, err := lily.NewConsumer(b.tr, lily.HandlerFunc(func(context.Context, *lily.Delivery) error {
		if w, now := window.Load(), time.Now(); w != nil && now.After(w[0]) && now.Before(w[1]) {
			return errDown
		}
		return nil
	}), lily.ConsumerOptions{Queue: qc, Concurrency: 4, Prefetch: 64, ReceiveWait: 20 * time.Millisecond,
		// The recorder writes the breaker's transitions to the catalog,
		// where [[redrive_rule]] when = "breaker_closed" finds the outage.
		Hooks:  []lily.Hook{hook, rules.NewRuntimeRecorder(b.cat, rules.RecorderParams{Consumer: "demo-outage"})},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return out, err
	}
	stop := runInBackground(ctx, c)
	defer stop()

	// The timeline starts once one message went through: a consumer that
	// is still joining its group (Kafka, on a loaded machine, can take
	// seconds) would otherwise meet the outage's traffic only after it.
	if err := lily.Publish(ctx, b.tr, qc.Name, []lily.Message{{Body: []byte(`{"order":"warm-up"}`)}}); err != nil {
		return out, err
	}
	published.Add(1)
	select {
	case <-firstAck:
	case <-time.After(time.Minute):
		return out, fmt.Errorf("demo outage: the consumer of %s handled no message within a minute", qc.Name)
	case <-ctx.Done():
		return out, ctx.Err()
	}
	start := time.Now()
	downFrom, downTo := start.Add(outageLead), start.Add(outageLead+f.outage)
	window.Store(&[2]time.Time{downFrom, downTo})

	// Traffic: every 10 ms, whatever brings the total to rate × elapsed
	// (a slow publish is caught up), until the retry span after the outage.
	trafficEnd := downTo.Add(time.Duration(pred.RetrySpanS*float64(time.Second)) + 500*time.Millisecond)
	tick := time.NewTicker(10 * time.Millisecond)
	counter := b.counter()
	for now := range tick.C {
		if now.After(trafficEnd) {
			now = trafficEnd
		}
		n := int(f.rate*now.Sub(start).Seconds()) - int(published.Load()-1) // the warm-up is not traffic
		if n > 0 {
			msgs := make([]lily.Message, n)
			for i := range msgs {
				msgs[i].Body = []byte(fmt.Sprintf(`{"order":%d}`, published.Load()-1+int64(i)))
			}
			if err := lily.Publish(ctx, b.tr, qc.Name, msgs); err != nil {
				tick.Stop()
				return out, err
			}
			published.Add(int64(n))
		}
		if lag, err := counter.InFlight(ctx, qc.Name); err == nil && lag > out.MaxLag {
			out.MaxLag = lag
		}
		if !now.Before(trafficEnd) {
			break
		}
	}
	tick.Stop()
	// Drain: everything published ends acked or dead-lettered.
	deadline := time.Now().Add(f.outage + time.Minute)
	for acked.Load()+dead.Load() < published.Load() {
		if time.Now().After(deadline) {
			return out, fmt.Errorf("demo outage: %d of %d messages still unsettled after the drain", published.Load()-acked.Load()-dead.Load(), published.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := stop(); err != nil {
		return out, err
	}
	if err := b.finish(ctx); err != nil {
		return out, err
	}
	if out.Lost, err = b.lost(ctx, qc.Name); err != nil {
		return out, err
	}
	out.Published, out.Acked, out.DeadLettered, out.Held, out.BreakerOpened =
		published.Load(), acked.Load(), dead.Load(), held.Load(), opened.Load()
	return out, nil
}

// printOutageScenario prints the scenario's result for a reader.
func printOutageScenario(w io.Writer, o OutageResult) {
	mode := "without the circuit breaker"
	if o.Breaker {
		mode = "with the circuit breaker"
	}
	fmt.Fprintf(w, "Outage scenario on %s, %s: %.0f msg/s, dependency down %.1fs, retry span %.1fs\n",
		o.Transport, mode, o.RatePerS, o.OutageS, o.RetrySpanS)
	rows := []struct {
		name  string
		value string
	}{
		{"published", fmt.Sprint(o.Published)},
		{"predicted dead letters", fmt.Sprintf("%.0f   (lily plan outage: rate × max(0, outage − span))", o.PredictedDeadLettered)},
		{"dead-lettered", fmt.Sprint(o.DeadLettered)},
		{"acked", fmt.Sprint(o.Acked)},
		{"held by the breaker", fmt.Sprintf("%d   (failures that waited in a bucket without spending a retry)", o.Held)},
		{"breaker opened", fmt.Sprintf("%d times", o.BreakerOpened)},
		{"max lag", fmt.Sprintf("%d messages waiting", o.MaxLag)},
		{"lost", fmt.Sprint(o.Lost)},
	}
	for _, r := range rows {
		fmt.Fprintf(w, "  %-23s %s\n", r.name, r.value)
	}
}

// runOutageDemo runs 'lily demo --scenario outage'.
func runOutageDemo(ctx context.Context, f Flags, stdout io.Writer) error {
	path, err := scenarioDB(f, "outage")
	if err != nil {
		return err
	}
	queue := scenarioQueue(f, "outage.orders")
	out, err := runOutageScenario(ctx, outageFlags{conn: f.conn(), queue: queue, db: path,
		rate: f.rate, outage: f.outage, breaker: f.breaker}, stdout)
	if err != nil {
		return err
	}
	if err := printScenario(stdout, f.asJSON, out, printOutageScenario); err != nil {
		return err
	}
	if out.Lost != 0 {
		return &ExitError{Code: 1, Msg: fmt.Sprintf("demo outage: %d messages unaccounted for", out.Lost)}
	}
	return nil
}
