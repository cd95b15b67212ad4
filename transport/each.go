package transport

import (
	"context"
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
// acked (the broker hands it out again). It stops after p.Limit dead
// letters (0: all) and returns how many were acked.
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
		if err := ack(ctx, ds); err != nil {
			return total, err
		}
		total += len(ds)
	}
	return total, nil
}
