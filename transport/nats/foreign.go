package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// Subjects of the server's advisories on a consumer (docs/design.md §8.8).
const (
	advisoryMaxDeliveries = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"
	advisoryTerminated    = "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED"
)

// ForeignConsumer is the dead-letter queue of a JetStream consumer that is
// not Lily's ([[foreign_dlq]] kind = "jetstream"): JetStream keeps a message
// that reached MaxDeliver, or that the consumer terminated, in its stream
// and publishes only an advisory. A durable advisory stream keeps those
// advisories while nobody drains (AdvisoryStream); DrainDeadLetters reads
// each, fetches its message by stream sequence, hands both to the catalog
// and deletes the advisory only after the catalog's commit. Publish (the
// redrive) sends a message back to that consumer alone.
type ForeignConsumer struct {
	t                *Transport
	stream, consumer string
	// subject, when set, is where a redrive publishes: a subject that only
	// this consumer reads (config redrive_subject). Empty: the message's
	// own subject, checked to reach this consumer alone.
	subject string
}

var (
	_ transport.DeadLetterDrainer = (*ForeignConsumer)(nil)
	_ transport.DeadLetterCounter = (*ForeignConsumer)(nil)
)

// Foreign returns the dead-letter queue of consumer on stream; a non-empty
// redriveSubject is where its redrives go (it must reach that consumer
// alone).
func (t *Transport) Foreign(stream, consumer, redriveSubject string) *ForeignConsumer {
	return &ForeignConsumer{t: t, stream: stream, consumer: consumer, subject: redriveSubject}
}

// AdvisoryStream is the stream that keeps the MAX_DELIVERIES and
// MSG_TERMINATED advisories of consumer on stream:
// "LILY_ADV_<stream>_<consumer>".
func AdvisoryStream(stream, consumer string) string { return "LILY_ADV_" + stream + "_" + consumer }

func (f *ForeignConsumer) advisorySubjects() []string {
	return []string{advisoryMaxDeliveries + "." + f.stream + "." + f.consumer, advisoryTerminated + "." + f.stream + "." + f.consumer}
}

// Declare creates the advisory stream (limits retention, file storage) and
// checks that the consumer exists. Advisories published before it existed
// are not kept: declare it with 'lily topology apply' or the first
// 'lily serve', before the consumer fails.
func (f *ForeignConsumer) Declare(ctx context.Context) error {
	if _, err := f.t.js.Consumer(ctx, f.stream, f.consumer); err != nil {
		return fmt.Errorf("nats: foreign dead-letter queue of consumer %s on stream %s: %w", f.consumer, f.stream, err)
	}
	_, err := f.t.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: AdvisoryStream(f.stream, f.consumer), Subjects: f.advisorySubjects(),
		Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Replicas: f.t.opts.Replicas, AllowDirect: true})
	if err != nil {
		return fmt.Errorf("nats: declare advisory stream %s: %w", AdvisoryStream(f.stream, f.consumer), err)
	}
	return nil
}

// advisory is what Lily reads of a MAX_DELIVERIES or MSG_TERMINATED
// advisory.
type advisory struct {
	Type       string    `json:"type"`
	Time       time.Time `json:"timestamp"`
	Stream     string    `json:"stream"`
	Consumer   string    `json:"consumer"`
	StreamSeq  uint64    `json:"stream_seq"`
	Deliveries uint64    `json:"deliveries"`
	// Reason is a terminated message's reason (servers 2.10.4+).
	Reason string `json:"reason"`
}

// DeadLetterDepth counts the advisories not drained yet.
func (f *ForeignConsumer) DeadLetterDepth(ctx context.Context, _ string) (int64, error) {
	s, err := f.t.stream(ctx, AdvisoryStream(f.stream, f.consumer))
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("nats: advisory stream %s: %w", AdvisoryStream(f.stream, f.consumer), err)
	}
	return int64(info.State.Msgs), nil
}

// DrainDeadLetters hands the consumer's failed messages to store in
// batches, in advisory order: each message's body and headers as the
// stream holds them (direct get by sequence), with the advisory's evidence
// in evidence.HeaderJetStream* headers. A message the stream no longer
// holds (its limits removed it, or a work-queue stream removed it when it
// was terminated) is handed over all the same, without a body and marked
// removed, never skipped. A batch's advisories are deleted only after
// store returned nil for it.
func (f *ForeignConsumer) DrainDeadLetters(ctx context.Context, p *transport.DrainParams, store func(context.Context, []*transport.Delivery) error) (int, error) {
	adv, err := f.t.stream(ctx, AdvisoryStream(f.stream, f.consumer))
	if err != nil {
		return 0, err
	}
	src, err := f.t.stream(ctx, f.stream)
	if err != nil {
		return 0, err
	}
	subject := "$JS.EVENT.ADVISORY.CONSUMER.*." + f.stream + "." + f.consumer
	return drainStream(ctx, adv, subject, p, func(ctx context.Context, from uint64, want int) ([]held, error) {
		var hs []held
		for len(hs) < want {
			raw, err := adv.GetMsg(ctx, from, jetstream.WithGetMsgSubject(subject))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("nats: read advisory stream %s at %d: %w", AdvisoryStream(f.stream, f.consumer), from, err)
			}
			from = raw.Sequence + 1
			d, err := f.deadLetter(ctx, src, p.Queue, raw)
			if err != nil {
				return nil, err
			}
			hs = append(hs, held{seq: raw.Sequence, d: d})
		}
		return hs, nil
	}, store)
}

// deadLetter builds the dead letter of one advisory.
func (f *ForeignConsumer) deadLetter(ctx context.Context, src jetstream.Stream, queue string, raw *jetstream.RawStreamMsg) (*transport.Delivery, error) {
	var a advisory
	if err := json.Unmarshal(raw.Data, &a); err != nil || a.StreamSeq == 0 {
		return nil, fmt.Errorf("nats: advisory %d of %s is not a consumer advisory (%v): %.200q", raw.Sequence, AdvisoryStream(f.stream, f.consumer), err, raw.Data)
	}
	kind := evidence.JetStreamMaxDeliveries
	if strings.HasPrefix(raw.Subject, advisoryTerminated) {
		kind = evidence.JetStreamTerminated
	}
	h := transport.Headers{}
	var msg transport.Message
	m, err := src.GetMsg(ctx, a.StreamSeq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		h[evidence.HeaderJetStreamRemoved] = "true"
	case err != nil:
		return nil, fmt.Errorf("nats: get message %d of stream %s (advisory %d): %w", a.StreamSeq, f.stream, raw.Sequence, err)
	default:
		dec := decodeHeaders(m.Header)
		h = dec.Headers
		msg = transport.Message{EventID: dec.EventID, Key: dec.Key, Type: dec.Type, Body: m.Data}
		h[evidence.HeaderJetStreamSubject] = m.Subject
	}
	if msg.EventID == "" {
		msg.EventID = messageID(h, f.stream, a.StreamSeq)
	}
	h[evidence.HeaderJetStreamAdvisory] = kind
	h[evidence.HeaderJetStreamStream] = f.stream
	h[evidence.HeaderJetStreamConsumer] = f.consumer
	h[evidence.HeaderJetStreamSequence] = strconv.FormatUint(a.StreamSeq, 10)
	h[evidence.HeaderJetStreamDeliveries] = strconv.FormatUint(a.Deliveries, 10)
	h[evidence.HeaderJetStreamTime] = a.Time.UTC().Format(time.RFC3339Nano)
	if a.Reason != "" {
		h[evidence.HeaderJetStreamTermReason] = a.Reason
	}
	msg.Headers = h
	return &transport.Delivery{Message: msg, Queue: queue, DeliveryCount: int(a.Deliveries), EnqueuedAt: raw.Time,
		MessageID: fmt.Sprintf("%s:%d", f.stream, a.StreamSeq)}, nil
}

// Publish (the redrive) sends each message back to the consumer alone: to
// the redrive subject, else to the subject it had, after checking on the
// stream that the subject is captured by the stream and read by this
// consumer (its filter) and by no other consumer of the stream — else it
// refuses, naming the consumers that would get it too. The evidence headers
// of the ingest are left out. A message whose body the stream had removed
// is refused.
func (f *ForeignConsumer) Publish(ctx context.Context, p *transport.PublishParams) error {
	msgs := make([]*natsgo.Msg, len(p.Messages))
	checked := map[string]bool{}
	for i, m := range p.Messages {
		if m.Headers[evidence.HeaderJetStreamRemoved] == "true" {
			return fmt.Errorf("nats: redrive %s to consumer %s: the stream's limits had removed the message before it was ingested, so its body is unknown (discard the entry)", m.EventID, f.consumer)
		}
		subject := f.subject
		if subject == "" {
			subject, _ = m.Headers[evidence.HeaderJetStreamSubject].(string)
		}
		if subject == "" {
			return fmt.Errorf("nats: redrive %s to consumer %s: no subject known: set redrive_subject in its [[foreign_dlq]] entry", m.EventID, f.consumer)
		}
		if !checked[subject] {
			if err := f.alone(ctx, subject); err != nil {
				return err
			}
			checked[subject] = true
		}
		h := transport.CloneHeaders(m.Headers)
		for k := range h {
			if strings.HasPrefix(k, evidence.HeaderJetStreamPrefix) {
				delete(h, k)
			}
		}
		hdr, err := encodeHeaders(m, h)
		if err != nil {
			return err
		}
		msgs[i] = &natsgo.Msg{Subject: subject, Header: hdr, Data: m.Body}
	}
	if err := f.t.publishAll(ctx, msgs); err != nil {
		return fmt.Errorf("nats: redrive to consumer %s of stream %s: %w", f.consumer, f.stream, err)
	}
	return nil
}

// alone checks that a message published to subject is stored by the
// stream and delivered to the consumer and to no other consumer of the
// stream.
func (f *ForeignConsumer) alone(ctx context.Context, subject string) error {
	s, err := f.t.js.Stream(ctx, f.stream)
	if err != nil {
		return fmt.Errorf("nats: redrive to stream %s: %w", f.stream, err)
	}
	captured := false
	for _, pattern := range s.CachedInfo().Config.Subjects {
		captured = captured || subjectMatches(pattern, subject)
	}
	if !captured {
		return fmt.Errorf("nats: redrive subject %s: stream %s does not capture it: %w", subject, f.stream, transport.ErrUnknownQueue)
	}
	var others []string
	found := false
	names := s.ListConsumers(ctx)
	for info := range names.Info() {
		reads := info.Config.FilterSubject == "" || subjectMatches(info.Config.FilterSubject, subject)
		for _, fs := range info.Config.FilterSubjects {
			reads = reads || subjectMatches(fs, subject)
		}
		switch {
		case info.Name == f.consumer:
			found = true
			if !reads {
				return fmt.Errorf("nats: redrive subject %s: consumer %s of stream %s does not read it (filter %q)", subject, f.consumer, f.stream, info.Config.FilterSubject)
			}
		case reads:
			others = append(others, info.Name)
		}
	}
	if err := names.Err(); err != nil {
		return fmt.Errorf("nats: list the consumers of stream %s: %w", f.stream, err)
	}
	if !found {
		return fmt.Errorf("nats: redrive to consumer %s of stream %s: no such consumer: %w", f.consumer, f.stream, transport.ErrUnknownQueue)
	}
	if len(others) > 0 {
		return fmt.Errorf("nats: redrive subject %s would reach consumers %s of stream %s too, not %s alone: give %s a filter subject of its own and name it as redrive_subject in the [[foreign_dlq]] entry",
			subject, strings.Join(others, ", "), f.stream, f.consumer, f.consumer)
	}
	return nil
}

// subjectMatches reports whether subject matches pattern ('*' one token,
// '>' the rest).
func subjectMatches(pattern, subject string) bool {
	pt, st := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" {
			return len(st) > i
		}
		if i >= len(st) || (p != "*" && p != st[i]) {
			return false
		}
	}
	return len(pt) == len(st)
}
