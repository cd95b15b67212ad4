package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/presence"
	"github.com/lily-mq/lily/transport"
)

// Accounted wraps a broker transport (RabbitMQ, Kafka) so that the
// ledger counts its messages: accepted when a publish is confirmed or when
// the runtime first receives the message (whoever published it), acked
// just before the broker acknowledgement, each at most once per message
// identity (Key: event ID and body digest).
// (The SQLite transport keeps its ledger in its own transactions and needs
// no wrapper.)
//
// Acked is recorded before the broker ack: if the process dies between the
// two, the message is redelivered and its second ack is not counted again.
// A message that is then dead-lettered instead would be counted both acked
// and dead-lettered — reconcile shows it as lost < 0 — never the reverse, so
// a loss is never hidden.
//
// "At most once" holds within the deduplication horizon
// (Ledger.SetHorizon, default 30 days): the per-event rows that
// remember what was counted are pruned after it (Ledger.Prune, which
// an Accounted runs on its own every AccountOptions.PruneEvery rows or
// PruneInterval), so the ledger's size is bounded by horizon × rate;
// docs/ledger.md explains how the horizon is chosen.
type Accounted struct {
	transport.Transport
	ledger *Ledger
	o      AccountOptions
	prune  pruneTrigger
	hold   holder
	beat   *presence.Beat
}

var (
	_ transport.Transport         = (*Accounted)(nil)
	_ transport.Declarer          = (*Accounted)(nil)
	_ transport.InFlightCounter   = (*Accounted)(nil)
	_ transport.InFlightBreakdown = (*Accounted)(nil)
	_ transport.LeaseRecoverer    = (*Accounted)(nil)
	_ transport.ConsumerStopper   = (*Accounted)(nil)
	_ transport.Featurer          = (*Accounted)(nil)
	_ transport.DeadLetterDrainer = (*Accounted)(nil)
	_ transport.DeadLetterCounter = (*Accounted)(nil)
	_ transport.Presence          = (*Accounted)(nil)
)

// ErrUnsupported is returned by an Accounted capability that the wrapped
// transport does not have.
var ErrUnsupported = errors.New("not supported by the transport")

// AccountOptions tune an Accounted; the zero value is the defaults.
type AccountOptions struct {
	// PruneEvery prunes the ledger (Ledger.Prune, in the background:
	// Close waits for it) after this many events (rows inserted, or
	// turned acked) were recorded through this Accounted. Defaults to 10000; negative disables
	// automatic pruning (by count and by time).
	PruneEvery int
	// PruneInterval prunes the ledger when this long has passed since the
	// last prune and some row was recorded since. Defaults to 10 minutes.
	PruneInterval time.Duration
	// HoldFor bounds how long Receive holds a batch it could not count
	// (the catalog is down) before it gives the batch back in a way that
	// does not raise its delivery count (see Receive). Defaults to 5
	// minutes.
	HoldFor time.Duration
	// HoldDelay returns, for a queue, a retry bucket delay of its topology
	// (e.g. its shortest bucket, retry.Policy.Buckets) through which a
	// batch held past HoldFor is given back as new copies; 0 or nil: none,
	// and the batch stays held.
	HoldDelay func(queue string) time.Duration
	// Now is the clock of the ledger rows and of the bounds above.
	// Defaults to time.Now.
	Now func() time.Time
	// Log receives the reports of a catalog outage, of dead letters
	// stored because the broker refused their copies, and of pruning.
	// Defaults to slog.Default().
	Log *slog.Logger
	// KeepRefused turns off the catalog fallback for refused dead-letter
	// copies (refused.go): the wrapped transport then handles a refusal
	// as it does without a catalog (RabbitMQ: holds the original and
	// publishes the copy again).
	KeepRefused bool
	// Presence tunes the heartbeats of the consumers that run through
	// this Accounted and the reading of their queues' pauses
	// (docs/design.md §9.10). Its Log and Now default to the above.
	Presence presence.Options
}

// Defaults of AccountOptions.
const (
	DefaultPruneEvery    = 10000
	DefaultPruneInterval = 10 * time.Minute
	DefaultHoldFor       = 5 * time.Minute
)

// Account wraps t, counting into l, with the default options.
func Account(t transport.Transport, l *Ledger) *Accounted {
	return AccountWith(t, l, AccountOptions{})
}

// AccountWith wraps t, counting into l, with options o. Its automatic
// pruning folds what is older than l's horizon.
func AccountWith(t transport.Transport, l *Ledger, o AccountOptions) *Accounted {
	if o.PruneEvery == 0 {
		o.PruneEvery = DefaultPruneEvery
	}
	if o.PruneInterval <= 0 {
		o.PruneInterval = DefaultPruneInterval
	}
	if o.HoldFor <= 0 {
		o.HoldFor = DefaultHoldFor
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Presence.Log == nil {
		o.Presence.Log = o.Log
	}
	if o.Presence.Now == nil {
		o.Presence.Now = o.Now
	}
	a := &Accounted{Transport: t, ledger: l, o: o, beat: presence.New(l.store, o.Presence)}
	a.prune.last.Store(o.Now().UnixNano())
	a.prune.ctx, a.prune.cancel = context.WithCancel(context.Background())
	return a
}

// Publish publishes through the wrapped transport and counts the confirmed
// messages as accepted (once per event ID); a redrive (p.Redrive) is not
// counted: the messages were accepted before.
//
// The messages it counts carry HeaderCounted, so that a consumer whose
// ledger trusts the mark counts them at settlement rather than on receipt;
// a redrive carries HeaderAcceptedOn, its queue, so that such a consumer
// counts it acked only there, whatever its body became.
func (a *Accounted) Publish(ctx context.Context, p *transport.PublishParams) error {
	if p.Redrive {
		mp := *p
		mp.Messages = mark(p.Messages, HeaderAcceptedOn, p.Queue)
		return a.Transport.Publish(ctx, &mp)
	}
	mp := *p
	mp.Messages = markCounted(p.Messages)
	if err := a.Transport.Publish(ctx, &mp); err != nil {
		return err
	}
	keys := make([]string, len(p.Messages))
	for i, m := range p.Messages {
		keys[i] = Key(m.EventID, m.Body)
	}
	n, err := a.ledger.countMany(ctx, "accepted", map[string][]string{p.Queue: keys}, a.o.Now())
	a.recorded(n)
	return err
}

// Settle counts the acknowledgements, then settles through the wrapped
// transport. A dead-lettering with reason "parked" (a message diverted
// behind its key's head, ordering park or block) goes straight into the
// catalog as a parked entry — committed before the original is
// acknowledged, and not counted as acked — so that the key's order is
// known to the catalog at once, with no broker dead-letter queue to ingest
// first.
func (a *Accounted) Settle(ctx context.Context, p *transport.SettleParams) error {
	trusts, err := a.ledger.trustsMarks(ctx)
	if err != nil {
		return fmt.Errorf("catalog: record acks before settling: %w", err)
	}
	byQueue := map[string][]string{}
	// When the ledger trusts marks: the keys settled otherwise, to be
	// known as accepted, and the acks of deliveries redriven to the queue
	// that accepted them before, counted acked only (HeaderAcceptedOn).
	others, redrivenAcks := map[string][]string{}, map[string][]string{}
	var parked []*catalog.Entry
	ss := p.Settlements
	for i, s := range p.Settlements {
		d := s.Delivery
		redriven := trusts && acceptedHere(d)
		if trusts && !redriven && s.Action != transport.Ack {
			others[d.Queue] = append(others[d.Queue], Key(d.EventID, d.Body))
		}
		switch {
		case s.Action == transport.Ack && redriven:
			redrivenAcks[d.Queue] = append(redrivenAcks[d.Queue], Key(d.EventID, d.Body))
		case s.Action == transport.Ack:
			byQueue[d.Queue] = append(byQueue[d.Queue], Key(d.EventID, d.Body))
		case s.Action == transport.DeadLetter && s.Reason == string(evidence.ReasonParked):
			if len(parked) == 0 {
				ss = slices.Clone(p.Settlements)
			}
			e := catalog.NewEntry(s.Delivery.Queue, s.Delivery.Message, s.Headers, s.Reason, time.Now())
			e.DLKey = parkedKey(e)
			parked = append(parked, e)
			ss[i] = transport.Settlement{Delivery: s.Delivery, Action: transport.Ack}
		}
	}
	var n int64
	if trusts {
		n, err = a.ledger.settlePG(ctx, byQueue, others, a.o.Now())
		if err == nil && len(redrivenAcks) > 0 {
			var m int64
			m, err = a.ledger.countMany(ctx, "acked", redrivenAcks, a.o.Now())
			n += m
		}
	} else {
		n, err = a.ledger.countMany(ctx, "acked", byQueue, a.o.Now())
	}
	if err != nil {
		return fmt.Errorf("catalog: record acks before settling: %w", err)
	}
	a.recorded(n)
	if len(parked) > 0 {
		if err := a.ledger.store.Insert(ctx, parked...); err != nil {
			return fmt.Errorf("catalog: park before settling: %w", err)
		}
	}
	if !a.o.KeepRefused {
		return a.settleRefusable(ctx, ss, p.OnStored)
	}
	return a.Transport.Settle(ctx, &transport.SettleParams{Settlements: ss})
}

// parkedKey identifies the parking of one message (Entry.DLKey): a parked
// entry inserted before a failed ack is not inserted again when the
// message is redelivered and parked again — the same dead-lettering.
func parkedKey(e *catalog.Entry) string {
	h := sha256.New()
	for _, f := range []string{"parked", e.Queue, e.EventID, e.BodySHA256, e.Source, e.SourceCoords, e.HoldKey, strconv.Itoa(e.RedriveCount)} {
		h.Write([]byte(f))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
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
		if err := a.ledger.ensureQueue(ctx, q.Name); err != nil {
			return err
		}
	}
	return nil
}

// InFlight delegates to the wrapped transport.
func (a *Accounted) InFlight(ctx context.Context, queue string) (int64, error) {
	c, ok := a.Transport.(transport.InFlightCounter)
	if !ok {
		return 0, fmt.Errorf("in-flight count: %w", ErrUnsupported)
	}
	return c.InFlight(ctx, queue)
}

// InFlightParts delegates to the wrapped transport (its InFlight, not
// broken down, without a breakdown).
func (a *Accounted) InFlightParts(ctx context.Context, queue string) (transport.InFlightParts, error) {
	if b, ok := a.Transport.(transport.InFlightBreakdown); ok {
		return b.InFlightParts(ctx, queue)
	}
	n, err := a.InFlight(ctx, queue)
	return transport.InFlightParts{Other: n}, err
}

// RecoverLeases delegates to the wrapped transport.
func (a *Accounted) RecoverLeases(ctx context.Context, p *transport.RecoverParams) (int, error) {
	r, ok := a.Transport.(transport.LeaseRecoverer)
	if !ok {
		return 0, fmt.Errorf("recover leases: %w", ErrUnsupported)
	}
	return r.RecoverLeases(ctx, p)
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

// Unreceive forwards to the wrapped transport (transport.Unreceiver);
// without one it reports errors.ErrUnsupported and the runtime processes
// what it received. A given-back delivery was counted accepted on receipt
// and will be again, once, by its identity.
func (a *Accounted) Unreceive(ctx context.Context, p *transport.UnreceiveParams) error {
	if u, ok := a.Transport.(transport.Unreceiver); ok {
		return u.Unreceive(ctx, p)
	}
	return fmt.Errorf("unreceive: %w: %w", ErrUnsupported, errors.ErrUnsupported)
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

// QueueFeatures are the wrapped transport's for queue
// (transport.FeaturesOf), with CatalogParking.
func (a *Accounted) QueueFeatures(queue string) transport.Features {
	f := transport.FeaturesOf(a.Transport, queue)
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

// ReportConsumer records a consumer's heartbeat state in the catalog
// (transport.Presence, through presence.Beat).
func (a *Accounted) ReportConsumer(ctx context.Context, s transport.ConsumerState) {
	a.beat.ReportConsumer(ctx, s)
}

// QueuePaused reports whether queue is paused, as the heartbeat last read
// it (transport.Presence).
func (a *Accounted) QueuePaused(queue string) (bool, <-chan struct{}) {
	return a.beat.QueuePaused(queue)
}
