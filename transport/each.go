package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// RunEach runs f(0..n-1) on up to limit goroutines at once (at least one)
// and returns each call's error, aligned with i. One call runs on the
// caller's goroutine.
func RunEach(n, limit int, f func(i int) error) []error {
	errs := make([]error, n)
	if n == 1 {
		errs[0] = f(0)
		return errs
	}
	sem := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errs
}

// SettleErrorOf returns nil when every element of errs is nil, else a
// *SettleError holding them (aligned with the settlements or deliveries
// they belong to).
func SettleErrorOf(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return &SettleError{Errs: errs}
		}
	}
	return nil
}

// DrainBatches is the loop of a DeadLetterDrainer whose dead letters are
// taken from a queue in batches: next returns up to n of them (none: the
// queue is drained), store keeps a batch (the catalog's commit), and only
// then ack removes it from the broker. A batch that store refuses is not
// acked (the broker hands it out again). An ack may fail for some
// deliveries with ErrLeaseLost (in a *SettleError aligned with the batch):
// their lease ran out while the batch was stored, so they are back in the
// queue, stored already, and a later read stores them again (the catalog's
// ingest is idempotent) and removes them — unless no delivery of the batch
// kept its lease, which says the lease is too short for a batch and would
// repeat forever: that is an error. It stops after p.Limit dead letters
// (0: all) and returns how many were acked.
func DrainBatches(ctx context.Context, p *DrainParams, next func(ctx context.Context, n int) ([]*Delivery, error),
	store func(context.Context, []*Delivery) error, ack func(context.Context, []*Delivery) error) (int, error) {
	batch := p.Batch
	if batch <= 0 {
		batch = 256
	}
	total := 0
	for p.Limit <= 0 || total < p.Limit {
		n := batch
		if p.Limit > 0 {
			n = min(n, p.Limit-total)
		}
		ds, err := next(ctx, n)
		if err != nil {
			return total, err
		}
		if len(ds) == 0 {
			return total, nil
		}
		if err := store(ctx, ds); err != nil {
			return total, err
		}
		acked, err := ackedOf(ack(ctx, ds), len(ds))
		total += acked
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// ackedOf reads an ack's error for a batch of n: how many were removed,
// and the error that ends the drain (nil when the only failures are lost
// leases and at least one delivery was removed).
func ackedOf(err error, n int) (int, error) {
	if err == nil {
		return n, nil
	}
	var se *SettleError
	if !errors.As(err, &se) || len(se.Errs) != n {
		return 0, err
	}
	acked := 0
	for _, e := range se.Errs {
		switch {
		case e == nil:
			acked++
		case !errors.Is(e, ErrLeaseLost):
			return acked, err
		}
	}
	if acked == 0 {
		return 0, fmt.Errorf("every lease of a batch of %d ran out before it was stored and removed (raise the transport's visibility timeout or lower the drain's batch): %w", n, err)
	}
	return acked, nil
}
