package livelint

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/lint"
	"github.com/lily-mq/lily/transport/nats"
)

// NATSConsumerState is one consumer as the server has it: a nats queue's,
// or that of a [[foreign_dlq]] kind = "jetstream".
type NATSConsumerState struct {
	// Queue is the [[queue]] or [[foreign_dlq]] name.
	Queue string
	// Foreign is set for a [[foreign_dlq]] entry.
	Foreign          bool
	Stream, Consumer string
	// Exists and Config describe the consumer.
	Exists bool
	Config jetstream.ConsumerConfig
	// DLQRetention is the retention of a nats queue's dead-letter stream
	// ("" when it does not exist).
	DLQRetention jetstream.RetentionPolicy
	DLQExists    bool
	// AdvisoryStream reports whether a foreign consumer's advisory stream
	// exists.
	AdvisoryStream bool
}

// ReadNATS reads the consumers of the configuration's nats queues and
// [[foreign_dlq]] kind = "jetstream" entries through t.
func ReadNATS(ctx context.Context, cfg config.Config, t *nats.Transport) ([]NATSConsumerState, error) {
	js := t.JetStream()
	var out []NATSConsumerState
	read := func(s *NATSConsumerState) error {
		c, err := js.Consumer(ctx, s.Stream, s.Consumer)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("read consumer %s of stream %s: %w", s.Consumer, s.Stream, err)
		}
		s.Exists, s.Config = true, c.CachedInfo().Config
		return nil
	}
	exists := func(name string) (jetstream.Stream, bool, error) {
		st, err := js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, false, nil
		}
		return st, err == nil, err
	}
	for _, q := range cfg.WithDefaults().Queues {
		if q.Transport != lily.TransportNATS {
			continue
		}
		b := t.QueueBinding(q.Name)
		s := NATSConsumerState{Queue: q.Name, Stream: b.Stream, Consumer: b.Consumer}
		if err := read(&s); err != nil {
			return nil, err
		}
		st, ok, err := exists(nats.DeadLetterStream(q.Name))
		if err != nil {
			return nil, err
		}
		if ok {
			s.DLQExists, s.DLQRetention = true, st.CachedInfo().Config.Retention
		}
		out = append(out, s)
	}
	for _, f := range cfg.ForeignDLQs {
		if f.Kind != config.ForeignJetStream {
			continue
		}
		s := NATSConsumerState{Queue: f.Queue, Foreign: true, Stream: f.Stream, Consumer: f.Consumer}
		if err := read(&s); err != nil {
			return nil, err
		}
		var err error
		if _, s.AdvisoryStream, err = exists(nats.AdvisoryStream(f.Stream, f.Consumer)); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// CheckNATS judges the consumers as the server has them: each exists; a
// foreign consumer gives up on a message at some MaxDeliver (else the
// server never says so), its advisories are kept, and its BackOff fits in
// MaxDeliver; a nats queue's consumer has no MaxDeliver (Lily's retries
// count as deliveries on the server) and its dead-letter stream can be
// read without being emptied.
func CheckNATS(states []NATSConsumerState) []lint.Finding {
	var out []lint.Finding
	for _, s := range states {
		add := func(sev lint.Severity, code, what, why, fix string) {
			out = append(out, lint.Finding{Severity: sev, Queue: s.Queue, Code: code, What: what, Why: why, Fix: fix})
		}
		name := fmt.Sprintf("consumer %s of stream %s", s.Consumer, s.Stream)
		if !s.Exists {
			fix := "run 'lily topology apply --config <file>'"
			if s.Foreign {
				fix = "name the stream and consumer the service consumes with in the [[foreign_dlq]] entry"
			}
			add(lint.Error, lint.CodeNATSConsumerMissing, name+" does not exist",
				"nothing is consumed, and no failed message is reported", fix)
			continue
		}
		c := s.Config
		if c.MaxDeliver > 0 && len(c.BackOff) > c.MaxDeliver {
			add(lint.Warning, lint.CodeNATSBackOffBeyondMaxDeliver,
				fmt.Sprintf("%s has %d BackOff steps and MaxDeliver %d", name, len(c.BackOff), c.MaxDeliver),
				"the server stops delivering at MaxDeliver: the BackOff steps after it never run, and the retries end sooner than the schedule reads",
				fmt.Sprintf("shorten BackOff to %d steps, or raise MaxDeliver to %d", c.MaxDeliver, len(c.BackOff)))
		}
		if s.Foreign {
			if c.MaxDeliver <= 0 {
				add(lint.Warning, lint.CodeNATSMaxDeliverUnlimited, name+" has MaxDeliver -1 (unlimited)",
					"the server redelivers a message that always fails forever and never sends a MAX_DELIVERIES advisory: "+
						"a poison message loops, and only the messages the service terminates reach the catalog",
					"set MaxDeliver on the consumer (e.g. 5); Lily then takes in what reaches it")
			}
			if !s.AdvisoryStream {
				add(lint.Error, lint.CodeNATSAdvisoryStreamMissing, "no advisory stream "+nats.AdvisoryStream(s.Stream, s.Consumer),
					"the server publishes MAX_DELIVERIES and MSG_TERMINATED once, to whoever listens: without the stream, "+
						"those published now are lost, and their messages never reach the catalog",
					"run 'lily dlq ingest --config <file>' or 'lily serve' (either declares it)")
			}
			continue
		}
		if c.MaxDeliver > 0 {
			add(lint.Warning, lint.CodeNATSMaxDeliverCountsRetries, fmt.Sprintf("%s has MaxDeliver %d", name, c.MaxDeliver),
				"Lily retries with NakWithDelay, which the server counts as a delivery: at MaxDeliver it stops delivering the message, "+
					"retries included, and Lily never dead-letters it with evidence (it stays in the stream, unacknowledged)",
				"set MaxDeliver to -1: Lily bounds deliveries itself (delivery_limit)")
		}
		if s.DLQExists && s.DLQRetention == jetstream.WorkQueuePolicy {
			add(lint.Warning, lint.CodeNATSDLQWorkQueue, "dead-letter stream "+nats.DeadLetterStream(s.Queue)+" has work-queue retention",
				"a work-queue stream lets one consumer read each message and removes it when acknowledged: operators cannot peek at dead letters "+
					"without taking them off the stream",
				"recreate it with limits retention ('lily topology apply' declares it so)")
		}
	}
	return out
}
