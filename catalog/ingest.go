package catalog

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// Ingest drains the dead letters of queue from a broker into the catalog:
// each batch is committed to the catalog, then removed from the broker.
// Ingesting the same dead letter twice (a crash between the two) adds one
// entry. It returns how many dead letters were drained.
func (s *Store) Ingest(ctx context.Context, d transport.DeadLetterDrainer, queue string) (int, error) {
	return d.DrainDeadLetters(ctx, &transport.DrainParams{Queue: queue}, func(ctx context.Context, ds []*transport.Delivery) error {
		now := time.Now()
		entries := make([]*Entry, len(ds))
		for i, dl := range ds {
			entries[i] = EntryFromDeadLetter(queue, dl, now)
		}
		if err := s.Insert(ctx, entries...); err != nil {
			return fmt.Errorf("catalog: ingest %s: %w", queue, err)
		}
		return nil
	})
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
			e.SourceCoords = sourceCoords(f.HasPartition, f.Partition, f.HasOffset, f.Offset)
		}
	}
	e.DLKey = deadLetterKey(d, rec, foreign, e.SourceCoords)
	return e
}

// foreignSource names the source of a dead letter without Lily evidence
// the way the runtime names its own ("<transport>/<queue>", DESIGN §7
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
