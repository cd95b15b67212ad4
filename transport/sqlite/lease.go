package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/lily-mq/lily/transport"
)

var (
	_ transport.LeaseExtender = (*Transport)(nil)
	_ transport.Unreceiver    = (*Transport)(nil)
)

// ExtendLeases moves the visibility timeout of deliveries still in flight
// to now + p.For (the transport's VisibilityTimeout when zero), in one
// transaction. A delivery whose lease was lost (its receipt no longer
// matches: it was handed out again) fails alone with ErrLeaseLost.
func (t *Transport) ExtendLeases(ctx context.Context, p *transport.ExtendParams) error {
	d := p.For
	if d <= 0 {
		d = t.opts.VisibilityTimeout
	}
	return t.eachReceipt(ctx, "extend lease", p.Deliveries, `UPDATE lily_messages SET visible_at = ?
		WHERE id = ? AND receive_count = ? AND lease_owner IS ?`, func() []any {
		return []any{t.opts.Now().Add(d).UnixMilli()}
	}, p.Consumer)
}

// Unreceive gives leased deliveries that no handler saw back to the queue:
// visible at once and with their receive count as it was before the lease,
// so that a consumer that stops with a leased batch neither makes the
// successor wait for the visibility timeout nor raises counts.
func (t *Transport) Unreceive(ctx context.Context, p *transport.UnreceiveParams) error {
	err := t.eachReceipt(ctx, "unreceive", p.Deliveries, `UPDATE lily_messages
		SET visible_at = ?, lease_owner = NULL, receive_count = receive_count - 1
		WHERE id = ? AND receive_count = ? AND lease_owner IS ?`, func() []any {
		return []any{t.now()}
	}, p.Consumer)
	t.signal()
	return err
}

// eachReceipt runs query for every delivery's receipt in one transaction
// (shared with concurrent writes: group.go):
// args() first, then the row ID, the receive count and the owner.
func (t *Transport) eachReceipt(ctx context.Context, what string, ds []*transport.Delivery, query string, args func() []any, owner string) error {
	if len(ds) == 0 {
		return nil
	}
	if err := t.checkOpen(); err != nil {
		return err
	}
	return t.writeSettlements(ctx, what, len(ds), func(ctx context.Context, tx *sql.Tx, errs []error) (failed int, _ bool, _ error) {
		stmt, err := tx.PrepareContext(ctx, query)
		if err != nil {
			return 0, false, fmt.Errorf("sqlite transport: %s: %w", what, err)
		}
		defer stmt.Close()
		for i, d := range ds {
			rc, ok := d.Receipt.(receipt)
			if !ok {
				errs[i] = fmt.Errorf("sqlite transport: %s %s: delivery was not received from this transport", what, d.EventID)
				failed++
				continue
			}
			res, err := stmt.ExecContext(ctx, append(args(), rc.id, rc.count, owner)...)
			if err != nil {
				return 0, false, fmt.Errorf("sqlite transport: %s %s: %w", what, d.EventID, err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				errs[i] = fmt.Errorf("sqlite transport: %s %s: %w", what, d.EventID, transport.ErrLeaseLost)
				failed++
			}
		}
		return failed, false, nil
	})
}
