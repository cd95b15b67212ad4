package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/transport"
)

// Ingest drains the dead letters of queue from a broker into the catalog:
// each batch is committed to the catalog, then removed from the broker.
// Ingesting the same dead letter twice (a crash between the two) adds one
// entry. It returns how many dead letters were drained.
func (s *Store) Ingest(ctx context.Context, d transport.DeadLetterDrainer, queue string) (int, error) {
	return s.IngestWith(ctx, d, IngestParams{Queue: queue})
}

// IngestParams are the arguments of Store.IngestWith.
type IngestParams struct {
	// Queue is the source queue whose dead letters are drained. Required.
	Queue string
	// Batch is the most dead letters committed in one transaction.
	// Defaults to the drainer's (256).
	Batch int
	// Limit stops after this many dead letters; 0 drains all.
	Limit int
	// Lease, when not empty, fences the ingest: every batch's transaction
	// first renews the lease of this name for Holder (to now+TTL) and
	// commits only if Holder still held it; otherwise the batch is not
	// stored, stays in the broker, and IngestWith returns ErrLeaseLost.
	// Take the lease first (Store.TakeLease).
	Lease  string
	Holder string
	TTL    time.Duration
	// Now returns the current time, for entries and the lease. Defaults
	// to time.Now.
	Now func() time.Time
	// OnEntry, if set, is called after each batch's commit (before the
	// broker ack) for every dead letter of the batch: its entry, whether
	// it was added to the catalog (false: it was there already, e.g.
	// ingested before a crash), and whether the broker made it by itself
	// (no Lily evidence: delivery limit, expiry, overflow, rejection).
	OnEntry func(e *Entry, added, brokerMade bool)
	// Foreign, when set, names the kind of a dead-letter queue another
	// framework fills ("masstransit", "x-death", "nservicebus"): Queue is
	// then the physical queue drained, it is registered as foreign, and
	// the dead letters added are counted accepted in its ledger in the
	// batch's transaction (redriven ones count as handed back).
	Foreign string
	// Reason, when set, is the reason of the dead letters without Lily
	// evidence (e.g. "skipped" for MassTransit's _skipped queue).
	Reason string
}

// IngestWith drains p.Queue's dead letters from a broker into the catalog
// like Ingest, with the options of p. It returns how many dead letters
// were drained (stored and removed from the broker).
func (s *Store) IngestWith(ctx context.Context, d transport.DeadLetterDrainer, p IngestParams) (int, error) {
	if p.Queue == "" {
		return 0, errors.New("catalog: ingest: empty queue name")
	}
	if p.Lease != "" {
		if err := checkLease(p.Lease, p.Holder, p.TTL); err != nil {
			return 0, err
		}
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	dp := &transport.DrainParams{Queue: p.Queue, Batch: p.Batch, Limit: p.Limit}
	return d.DrainDeadLetters(ctx, dp, func(ctx context.Context, ds []*transport.Delivery) error {
		now := p.Now()
		entries := make([]*Entry, len(ds))
		for i, dl := range ds {
			entries[i] = EntryFromDeadLetter(p.Queue, dl, now)
			if p.Reason != "" && !hasLilyReason(dl) {
				entries[i].Reason = p.Reason
			}
		}
		start := time.Now() // the spans' clock is the wall clock, not p.Now
		err := s.ingestBatch(ctx, p, now, entries)
		if s.tracer != nil {
			s.emitSpans(ctx, start, s.ingestSpans(p.Queue, ds, entries), err)
		}
		if err != nil {
			return err
		}
		if p.OnEntry != nil {
			for i, e := range entries {
				rec, _ := evidence.Decode(ds[i].Headers)
				p.OnEntry(e, e.ID != 0, rec.Reason == "")
			}
		}
		return nil
	})
}

// ingestBatch stores one batch in one transaction, renewing p's lease
// first when there is one. The transaction is keyed as an Insert's (the
// batch's dead-lettering identities); the renewal's conditional UPDATE
// holds the lease's row until the commit, so no other process takes the
// lease over while the batch is written.
func (s *Store) ingestBatch(ctx context.Context, p IngestParams, now time.Time, entries []*Entry) error {
	tx, err := s.db.BeginKeyed(ctx, dupKeys(entries))
	if err != nil {
		return fmt.Errorf("catalog: ingest %s: begin: %w", p.Queue, err)
	}
	defer tx.Rollback()
	if p.Lease != "" {
		held, err := renewLease(ctx, tx, p.Lease, p.Holder, p.TTL, now)
		if err != nil {
			return fmt.Errorf("catalog: ingest %s: %w", p.Queue, err)
		}
		if !held {
			return fmt.Errorf("catalog: ingest %s: lease %q no longer held by %s (another process took it over after it expired; the batch stays in the broker): %w",
				p.Queue, p.Lease, p.Holder, ErrLeaseLost)
		}
	}
	if err := catalogdb.InsertEntries(ctx, tx, entries); err != nil {
		return fmt.Errorf("catalog: ingest %s: %w", p.Queue, err)
	}
	if p.Foreign != "" {
		if err := countForeignAccepted(ctx, tx, p.Queue, p.Foreign, entries); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("catalog: ingest %s: commit: %w", p.Queue, err)
	}
	return nil
}

// EntryFromDeadLetter builds the catalog entry of a dead letter read from a
// broker. Lily's own evidence is used when present; a message the broker
// dead-lettered by itself (delivery limit, expiry, overflow, rejection)
// gets its reason and evidence from the broker's headers (x-death).
func EntryFromDeadLetter(queue string, d *transport.Delivery, now time.Time) *Entry {
	rec, _ := evidence.Decode(d.Headers)
	reason := string(rec.Reason)
	foreign := evidence.DecodeForeign(d.Headers)
	if reason == "" {
		if r, ok := evidence.BrokerReason(d.Headers); ok {
			reason = string(r)
		} else {
			reason = string(evidence.ReasonRejected)
		}
	}
	e := NewEntry(queue, d.Message, d.Headers, reason, now)
	if rec.Reason == "" {
		// No Lily evidence: describe what the broker (or another
		// framework) recorded.
		e.ErrorMessage = "dead-lettered by the broker without Lily evidence: " + reason
		if len(foreign) > 0 {
			f := foreign[0]
			what := f.Reason // e.g. RabbitMQ's delivery_limit, Kafka Connect's stage
			if what == "" {
				what = "failed" // Spring Kafka and Kafka Streams record no reason
			}
			e.ErrorMessage = fmt.Sprintf("dead-lettered by %s: %s", f.System, what)
			if f.Source != "" {
				e.ErrorMessage += " at " + f.Source
			}
			if f.Count > 0 {
				e.ErrorMessage += " (count " + strconv.Itoa(f.Count) + ")"
			}
			if f.Message != "" {
				e.ErrorMessage += ": " + f.Message
			}
			if f.ExceptionType != "" {
				e.ErrorType = f.ExceptionType
			}
			if !f.Time.IsZero() {
				e.DeadLetteredAt = f.Time.UTC()
			}
		}
		e.Fingerprint = evidence.Fingerprint(e.ErrorMessage)
		e.DeliveryCount = max(e.DeliveryCount, d.DeliveryCount)
		e.Source = foreignSource(queue, foreign)
		if len(foreign) > 0 && e.SourceCoords == "" {
			f := foreign[0]
			e.SourceCoords = catalogdb.SourceCoords(f.HasPartition, f.Partition, f.HasOffset, f.Offset)
		}
	}
	e.DLKey = deadLetterKey(d, rec, foreign, e.SourceCoords)
	return e
}

// foreignSource names the source of a dead letter without Lily evidence
// the way the runtime names its own ("<transport>/<queue>", docs/design.md §7
// x-lily-source), so that 'lily dlq group --by source' puts a queue's
// broker-made and Lily-made dead letters together: RabbitMQ's own dead
// letters (x-death) become "rabbitmq/<queue>", those of Kafka frameworks
// (Spring Kafka, Kafka Connect, Kafka Streams) "kafka/<queue>". Evidence of
// other systems keeps the bare queue name.
func foreignSource(queue string, foreign []evidence.ForeignEvidence) string {
	if len(foreign) == 0 {
		return queue
	}
	switch foreign[0].System {
	case evidence.SystemRabbitMQ:
		return "rabbitmq/" + queue
	case evidence.SystemSpringKafka, evidence.SystemKafkaConnect, evidence.SystemKafkaStreams:
		return "kafka/" + queue
	case evidence.SystemJetStream:
		return "nats/" + queue
	case evidence.SystemAzureFunctions:
		return "azqueue/" + queue
	}
	return queue
}

// deadLetterKey identifies one dead-lettering of one message: its event
// ID, where it failed (the source coordinates, when there are any), when it
// was dead-lettered (Lily's or the broker's record) and its body.
func deadLetterKey(d *transport.Delivery, rec evidence.Record, foreign []evidence.ForeignEvidence, coords string) string {
	h := sha256.New()
	h.Write([]byte(d.Queue + "\x00" + d.EventID + "\x00"))
	if coords != "" { // absent from the keys of entries without coordinates, as before
		h.Write([]byte("coords " + coords + "\x00"))
	}
	h.Write([]byte(evidence.FormatTime(rec.DeadLetteredAt) + "\x00"))
	for _, f := range foreign {
		h.Write([]byte(f.Origin + "|" + f.Reason + "|" + f.Source + "|" + strconv.Itoa(f.Count) + "|" + f.Time.String() + "\x00"))
	}
	h.Write(d.Body)
	return hex.EncodeToString(h.Sum(nil))
}
