package catalog

import (
	"context"
	"errors"

	"github.com/lily-mq/lily/transport"
)

// errNoExtend is returned by ExtendLeases when the wrapped transport
// cannot extend leases.
var errNoExtend = errors.New("catalog: the wrapped transport cannot extend leases (no transport.LeaseExtender)")

// ExtendLeases passes lease extensions on to the wrapped transport (SQLite,
// Pub/Sub's ModifyAckDeadline), so that wrapping a lease-based transport
// for the ledger does not take the runtime's lease extension away. The
// ledger has nothing to record for it.
func (a *Accounted) ExtendLeases(ctx context.Context, p *transport.ExtendParams) error {
	ex, ok := a.Transport.(transport.LeaseExtender)
	if !ok {
		return errNoExtend
	}
	return ex.ExtendLeases(ctx, p)
}
