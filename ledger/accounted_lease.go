package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/lily-mq/lily/transport"
)

// ExtendLeases delegates to the wrapped transport (transport.LeaseExtender,
// e.g. SQS's ChangeMessageVisibility), so that a consumer of an accounted
// lease-based transport keeps the leases of its deliveries in flight;
// without one it reports errors.ErrUnsupported.
func (a *Accounted) ExtendLeases(ctx context.Context, p *transport.ExtendParams) error {
	if e, ok := a.Transport.(transport.LeaseExtender); ok {
		return e.ExtendLeases(ctx, p)
	}
	return fmt.Errorf("extend leases: %w: %w", ErrUnsupported, errors.ErrUnsupported)
}
