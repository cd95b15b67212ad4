package transporttest

import (
	"context"
	"errors"
	"sync"

	"github.com/lily-mq/lily/transport"
)

// ErrInjected is the default error of an injected fault.
var ErrInjected = errors.New("transporttest: injected fault")

// Faulty wraps any transport and injects faults: failed or nacked
// publishes, settlements whose hand-off is not confirmed, a lost
// connection. Without faults armed it passes every call through.
type Faulty struct {
	transport.Transport

	mu          sync.Mutex
	publishFail int
	publishErr  error
	settleFail  map[transport.Action]int
	settleErr   error
	downCalls   int
}

var _ transport.Transport = (*Faulty)(nil)

// NewFaulty wraps t.
func NewFaulty(t transport.Transport) *Faulty {
	return &Faulty{Transport: t, settleFail: map[transport.Action]int{}}
}

// FailPublish makes the next n Publish calls fail with err (ErrInjected if
// nil) without publishing anything, as a nacked or timed-out confirm.
func (f *Faulty) FailPublish(n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.publishFail, f.publishErr = n, orInjected(err)
}

// FailSettle makes the next n settlements with the given action fail with
// err (ErrInjected if nil) without being applied — the hand-off of the copy
// was not confirmed, so the original must stay unacknowledged. Other
// settlements in the same batch pass through.
func (f *Faulty) FailSettle(a transport.Action, n int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settleFail[a] = n
	f.settleErr = orInjected(err)
}

// Disconnect makes the next n calls of any method fail with an error that
// wraps ErrInjected, as a lost connection would, changing nothing.
func (f *Faulty) Disconnect(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.downCalls = n
}

func orInjected(err error) error {
	if err == nil {
		return ErrInjected
	}
	return err
}

func (f *Faulty) down() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.downCalls > 0 {
		f.downCalls--
		return errors.Join(errors.New("connection lost"), ErrInjected)
	}
	return nil
}

// Publish implements transport.Transport.
func (f *Faulty) Publish(ctx context.Context, p *transport.PublishParams) error {
	if err := f.down(); err != nil {
		return err
	}
	f.mu.Lock()
	if f.publishFail > 0 {
		f.publishFail--
		err := f.publishErr
		f.mu.Unlock()
		return err
	}
	f.mu.Unlock()
	return f.Transport.Publish(ctx, p)
}

// Receive implements transport.Transport.
func (f *Faulty) Receive(ctx context.Context, p *transport.ReceiveParams) ([]*transport.Delivery, error) {
	if err := f.down(); err != nil {
		return nil, err
	}
	return f.Transport.Receive(ctx, p)
}

// Settle implements transport.Transport.
func (f *Faulty) Settle(ctx context.Context, p *transport.SettleParams) error {
	if err := f.down(); err != nil {
		return err
	}
	errs := make([]error, len(p.Settlements))
	pass := make([]transport.Settlement, 0, len(p.Settlements))
	idx := make([]int, 0, len(p.Settlements))
	f.mu.Lock()
	failed := false
	for i, s := range p.Settlements {
		if f.settleFail[s.Action] > 0 {
			f.settleFail[s.Action]--
			errs[i] = f.settleErr
			failed = true
			continue
		}
		pass = append(pass, s)
		idx = append(idx, i)
	}
	f.mu.Unlock()
	if !failed {
		return f.Transport.Settle(ctx, p)
	}
	if len(pass) > 0 {
		inner := transport.SettleErrors(f.Transport.Settle(ctx, &transport.SettleParams{Settlements: pass}), len(pass))
		for j, err := range inner {
			errs[idx[j]] = err
		}
	}
	return &transport.SettleError{Errs: errs}
}
