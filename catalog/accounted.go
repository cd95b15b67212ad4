package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// Accounted wraps a broker transport (RabbitMQ, Kafka) so that the catalog
// ledger counts its messages: accepted when a publish is confirmed, acked
// just before the broker acknowledgement, each at most once per event ID.
// (The SQLite transport keeps its ledger in its own transactions and needs
// no wrapper.)
//
// Acked is recorded before the broker ack: if the process dies between the
// two, the message is redelivered and its second ack is not counted again.
// A message that is then dead-lettered instead would be counted both acked
// and dead-lettered — reconcile shows it as lost < 0 — never the reverse, so
// a loss is never hidden.
type Accounted struct {
	transport.Transport
	store *Store
}

var (
	_ transport.Transport         = (*Accounted)(nil)
	_ transport.Declarer          = (*Accounted)(nil)
	_ transport.InFlightCounter   = (*Accounted)(nil)
	_ transport.LeaseRecoverer    = (*Accounted)(nil)
	_ transport.ConsumerStopper   = (*Accounted)(nil)
	_ transport.Featurer          = (*Accounted)(nil)
	_ transport.DeadLetterDrainer = (*Accounted)(nil)
	_ transport.DeadLetterCounter = (*Accounted)(nil)
)

// ErrUnsupported is returned by an Accounted capability that the wrapped
// transport does not have.
var ErrUnsupported = errors.New("not supported by the transport")

// Account wraps t, counting into store's ledger.
func Account(t transport.Transport, store *Store) *Accounted {
	return &Accounted{Transport: t, store: store}
}

// Publish publishes through the wrapped transport and counts the confirmed
// messages as accepted (once per event ID); a redrive (p.Redrive) is not
// counted: the messages were accepted before.
func (a *Accounted) Publish(ctx context.Context, p *transport.PublishParams) error {
	if err := a.Transport.Publish(ctx, p); err != nil {
		return err
	}
	if p.Redrive {
		return nil
	}
	ids := make([]string, len(p.Messages))
	for i, m := range p.Messages {
		ids[i] = m.EventID
	}
	return a.store.count(ctx, p.Queue, "accepted", ids)
}

// Settle counts the acknowledgements, then settles through the wrapped
// transport. A dead-lettering with reason "parked" (a message diverted
// behind its key's head, ordering park or block) goes straight into the
// catalog as a parked entry — committed before the original is
// acknowledged, and not counted as acked — so that the key's order is
// known to the catalog at once, with no broker dead-letter queue to ingest
// first.
func (a *Accounted) Settle(ctx context.Context, p *transport.SettleParams) error {
	byQueue := map[string][]string{}
	var parked []*Entry
	ss := p.Settlements
	for i, s := range p.Settlements {
		switch {
		case s.Action == transport.Ack:
			byQueue[s.Delivery.Queue] = append(byQueue[s.Delivery.Queue], s.Delivery.EventID)
		case s.Action == transport.DeadLetter && s.Reason == string(evidence.ReasonParked):
			if len(parked) == 0 {
				ss = slices.Clone(p.Settlements)
			}
			parked = append(parked, NewEntry(s.Delivery.Queue, s.Delivery.Message, s.Headers, s.Reason, time.Now()))
			ss[i] = transport.Settlement{Delivery: s.Delivery, Action: transport.Ack}
		}
	}
	for q, ids := range byQueue {
		if err := a.store.count(ctx, q, "acked", ids); err != nil {
			return fmt.Errorf("catalog: record acks before settling: %w", err)
		}
	}
	if len(parked) > 0 {
		if err := a.store.Insert(ctx, parked...); err != nil {
			return fmt.Errorf("catalog: park before settling: %w", err)
		}
	}
	return a.Transport.Settle(ctx, &transport.SettleParams{Settlements: ss})
}

// count records events of kind for queue, adding to the ledger counter only
// the event IDs not recorded before.
func (s *Store) count(ctx context.Context, queue, kind string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("catalog: ledger: %w", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO lily_ledger_events(queue, kind, event_id, at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`)
	if err != nil {
		return fmt.Errorf("catalog: ledger: %w", err)
	}
	defer stmt.Close()
	now := time.Now().UnixMilli()
	var added int64
	for _, id := range ids {
		res, err := stmt.ExecContext(ctx, queue, kind, id, now)
		if err != nil {
			return fmt.Errorf("catalog: ledger %s %s: %w", queue, kind, err)
		}
		n, _ := res.RowsAffected()
		added += n
	}
	var accepted, acked int64
	if kind == "accepted" {
		accepted = added
	} else {
		acked = added
	}
	if err := AddCountsTx(ctx, tx, queue, accepted, acked); err != nil {
		return err
	}
	return tx.Commit()
}

// Declare declares through the wrapped transport and registers the queues
// in the ledger.
func (a *Accounted) Declare(ctx context.Context, p *transport.DeclareParams) error {
	d, ok := a.Transport.(transport.Declarer)
	if !ok {
		return fmt.Errorf("declare: %w", ErrUnsupported)
	}
	if err := d.Declare(ctx, p); err != nil {
		return err
	}
	for _, q := range p.Queues {
		if err := a.store.ensureQueue(ctx, q.Name); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) ensureQueue(ctx context.Context, queue string) error {
	return withTx(ctx, s.db, func(tx *sql.Tx) error { return AddCountsTx(ctx, tx, queue, 0, 0) })
}

func withTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// InFlight delegates to the wrapped transport.
func (a *Accounted) InFlight(ctx context.Context, queue string) (int64, error) {
	c, ok := a.Transport.(transport.InFlightCounter)
	if !ok {
		return 0, fmt.Errorf("in-flight count: %w", ErrUnsupported)
	}
	return c.InFlight(ctx, queue)
}

// RecoverLeases delegates to the wrapped transport.
func (a *Accounted) RecoverLeases(ctx context.Context, p *transport.RecoverParams) (int, error) {
	r, ok := a.Transport.(transport.LeaseRecoverer)
	if !ok {
		return 0, fmt.Errorf("recover leases: %w", ErrUnsupported)
	}
	return r.RecoverLeases(ctx, p)
}

// StopConsumer delegates to the wrapped transport (a no-op without one).
func (a *Accounted) StopConsumer(ctx context.Context, p *transport.StopParams) error {
	if s, ok := a.Transport.(transport.ConsumerStopper); ok {
		return s.StopConsumer(ctx, p)
	}
	return nil
}

// CancelConsume delegates to the wrapped transport
// (transport.ConsumeCanceller); without one it reports errors.ErrUnsupported,
// which the runtime takes as "nothing was pushed".
func (a *Accounted) CancelConsume(ctx context.Context, p *transport.StopParams) error {
	if c, ok := a.Transport.(transport.ConsumeCanceller); ok {
		return c.CancelConsume(ctx, p)
	}
	return fmt.Errorf("cancel consume: %w: %w", ErrUnsupported, errors.ErrUnsupported)
}

// Features are the wrapped transport's, with CatalogParking.
func (a *Accounted) Features() transport.Features {
	var f transport.Features
	if fr, ok := a.Transport.(transport.Featurer); ok {
		f = fr.Features()
	}
	f.CatalogParking = true
	return f
}

// SettleConcurrency forwards the wrapped transport's
// (transport.ConcurrentSettler); 1 without one. Settle is safe for
// concurrent calls: the ledger's counts are transactions of their own.
func (a *Accounted) SettleConcurrency() int {
	if cs, ok := a.Transport.(transport.ConcurrentSettler); ok {
		return cs.SettleConcurrency()
	}
	return 1
}

// Unwrap returns the wrapped transport.
func (a *Accounted) Unwrap() transport.Transport { return a.Transport }

// DrainDeadLetters delegates to the wrapped transport.
func (a *Accounted) DrainDeadLetters(ctx context.Context, p *transport.DrainParams, store func(context.Context, []*transport.Delivery) error) (int, error) {
	d, ok := a.Transport.(transport.DeadLetterDrainer)
	if !ok {
		return 0, fmt.Errorf("drain dead letters: %w", ErrUnsupported)
	}
	return d.DrainDeadLetters(ctx, p, store)
}

// DeadLetterDepth delegates to the wrapped transport (0 without one: its
// dead letters are in the catalog already).
func (a *Accounted) DeadLetterDepth(ctx context.Context, queue string) (int64, error) {
	if d, ok := a.Transport.(transport.DeadLetterCounter); ok {
		return d.DeadLetterDepth(ctx, queue)
	}
	return 0, nil
}
