package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/redrive"
)

// The demo's second half: the bugs are fixed, the dead letters are worked
// through (discard what cannot be fixed, dry run, sample, the rest at a
// rate) and the ledger still balances.
const (
	fixedVersion   = "1.4.3"
	redriveSample  = 2
	redriveObserve = 500 * time.Millisecond
	redriveRate    = 200
	discardReason  = "malformed order bodies (truncated in transit) cannot be fixed by a redrive; reported to shop-web"
)

// handlerFixed is the order consumer after the fix: the inventory
// lookup knows retired SKUs and the gift-note renderer no longer crashes.
// A body that does not decode is still permanent, and the payment gateway
// still times out now and then.
func handlerFixed(ctx context.Context, d *lily.Delivery) error {
	var o Order
	if err := json.Unmarshal(d.Body, &o); err != nil {
		return lily.Permanent(fmt.Errorf("decode order: %w", err))
	}
	if d.RetryCount < o.GatewayTimeouts {
		return fmt.Errorf("charge order %s: %w", o.OrderID, errGatewayTimeout)
	}
	return nil
}

// redriveResult is what the second half did.
type redriveResult struct {
	discarded   int
	redriven    int
	rounds      int
	needsManual int
	restarts    int
}

// secondHalf fixes the bug and works through the dead letters with
// the operator's tools, as 'lily dlq' does.
func secondHalf(ctx context.Context, b *backend, f Flags, say func(string, ...any), stderr io.Writer) (redriveResult, error) {
	var out redriveResult
	q := b.queue.Name
	actor := catalog.DefaultActor()
	target := func(context.Context, string) (redrive.Publisher, error) { return b.tr, nil }
	maxRedrives := func(string) int { return b.queue.Settings().MaxRedrives }
	say("\nsecond half: the fix is deployed (orders-consumer %s: retired SKUs are known, gift notes render safely)", fixedVersion)

	// What a deploy cannot fix leaves the work list with a record.
	dis, err := b.cat.Discard(ctx, catalog.DecideParams{Filter: catalog.Filter{Queue: q, Reason: "permanent"},
		Reason: discardReason, Actor: actor})
	if err != nil {
		return out, fmt.Errorf("demo: discard the malformed orders: %w", err)
	}
	out.discarded = dis.Count
	say("  lily dlq discard --dead-letter-reason permanent --reason %q: %d discarded", "malformed ...", dis.Count)

	// The fixed version is named: the crash-type poison goes back too.
	base := redrive.Params{Filter: catalog.Filter{Queue: q}, Target: target, MaxRedrives: maxRedrives, Actor: actor,
		NewConsumerVersion: fixedVersion}
	dry := base
	dry.DryRun = true
	plan, err := redrive.New(b.cat).Redrive(ctx, dry)
	if err != nil {
		return out, fmt.Errorf("demo: redrive dry run: %w", err)
	}
	say("  lily dlq redrive --dry-run: would redrive %d, mark %d needs_manual; nothing changed", plan.Redriven, plan.NeedsManual)

	// A sample first, watched while the fixed worker runs.
	since, err := b.cat.LastID(ctx)
	if err != nil {
		return out, err
	}
	var ids []string
	sample := base
	sample.Limit = redriveSample
	sample.Op = catalog.NewOp(time.Now())
	sample.OnEntry = func(e catalog.EntryRef, outcome string) {
		if outcome == catalog.OutcomeRedriven {
			ids = append(ids, e.EventID)
		}
	}
	s, err := redrive.New(b.cat).Redrive(ctx, sample)
	if err != nil {
		return out, fmt.Errorf("demo: redrive the sample: %w", err)
	}
	out.redriven += s.Redriven
	out.needsManual += s.NeedsManual
	f.fixed = true
	if s.Redriven > 0 {
		out.rounds++
		n, err := supervise(ctx, b, f, say, stderr)
		out.restarts += n
		if err != nil {
			return out, err
		}
		back, err := redrive.New(b.cat).Observe(ctx, redrive.ObserveParams{Since: since, EventIDs: ids, Window: redriveObserve, Tick: b.finish})
		if err != nil {
			return out, err
		}
		if err := redrive.New(b.cat).RecordObservation(ctx, sample.Op, actor, ids, redriveObserve, back); err != nil {
			return out, fmt.Errorf("demo: %w", err)
		}
	}
	say("  lily dlq redrive --sample %d --observe %s: %d redriven, none dead-lettered again", redriveSample, redriveObserve, s.Redriven)

	// The rest, at a rate.
	rest := base
	rest.Rate = redriveRate
	r, err := redrive.New(b.cat).Redrive(ctx, rest)
	if err != nil {
		return out, fmt.Errorf("demo: redrive the rest: %w", err)
	}
	out.redriven += r.Redriven
	out.needsManual += r.NeedsManual
	if r.Redriven > 0 {
		out.rounds++
		n, err := supervise(ctx, b, f, say, stderr)
		out.restarts += n
		if err != nil {
			return out, err
		}
	}
	say("  lily dlq redrive --rate %d: %d redriven in %s; the fixed worker processed them", redriveRate, r.Redriven,
		r.Elapsed.Round(time.Millisecond))
	if err := b.finish(ctx); err != nil {
		return out, err
	}
	return out, nil
}
