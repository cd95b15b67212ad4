package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/lily-mq/lily"
)

// The NATS JetStream settings of Config (fields in config.go's Config):
//
//	nats_url               server URL(s), comma-separated; defaults to nats://127.0.0.1:4222
//	nats_ack_wait_seconds  the consumers' AckWait (the lease), 1..43200; defaults to 30
//	nats_retention         "workqueue" (default) or "limits": the streams Lily declares
//	[nats_queues.NAME]     stream = "...", consumer = "...", subject = "...": adopt existing ones

// NATSBinding adopts an existing JetStream stream and durable pull
// consumer for a nats queue ([nats_queues.NAME]); empty fields take Lily's
// names (the stream is the queue's name with '.' made '_', the consumer
// "lily", the subject the queue's name).
type NATSBinding struct {
	// Stream holds the queue's messages.
	Stream string `toml:"stream" json:"stream,omitempty"`
	// Consumer is the durable pull consumer Lily consumes with.
	Consumer string `toml:"consumer" json:"consumer,omitempty"`
	// Subject is where Lily publishes the queue's messages (and redrives).
	Subject string `toml:"subject" json:"subject,omitempty"`
}

// DefaultNATSAckWaitSeconds is nats_ack_wait_seconds' default.
const DefaultNATSAckWaitSeconds = 30

// NATSAckWait returns nats_ack_wait_seconds as a duration, or its default.
func (c Config) NATSAckWait() time.Duration {
	if c.NATSAckWaitSeconds == nil {
		return DefaultNATSAckWaitSeconds * time.Second
	}
	return time.Duration(*c.NATSAckWaitSeconds) * time.Second
}

// validateNATS checks the NATS settings and the names of the nats queues
// (a queue's name is its subject, and with dots made '_' its stream's).
func (c Config) validateNATS() []error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, a...)...))
	}
	for _, u := range strings.Split(c.NATSURL, ",") {
		if u = strings.TrimSpace(u); c.NATSURL != "" && !strings.HasPrefix(u, "nats://") && !strings.HasPrefix(u, "tls://") {
			bad(`nats_url = %q: want nats:// or tls:// URLs, comma-separated, e.g. "nats://127.0.0.1:4222"`, redactURL(c.NATSURL))
			break
		}
	}
	if v := c.NATSAckWaitSeconds; v != nil && (*v < 1 || *v > 43200) {
		bad("nats_ack_wait_seconds = %d: must be 1..43200 (up to 12 hours)", *v)
	}
	switch c.NATSRetention {
	case "", "workqueue", "limits":
	default:
		bad(`nats_retention = %q: must be "workqueue" (acknowledged messages leave the stream) or "limits"`, c.NATSRetention)
	}
	for q, b := range c.NATSQueues {
		qc, ok := c.Queue(q)
		switch {
		case !ok:
			bad("nats_queues: %q: no [[queue]] has this name (add one with transport = \"nats\", or remove the entry)", q)
		case qc.Transport != lily.TransportNATS:
			bad("nats_queues: %q: the queue's transport is %q; only a queue with transport = \"nats\" has a stream and consumer", q, qc.Transport)
		}
		for _, f := range [][2]string{{"stream", b.Stream}, {"consumer", b.Consumer}} {
			if strings.ContainsAny(f[1], ".*> \t") {
				bad("nats_queues: %q: %s = %q: a JetStream name has no '.', '*', '>' or blanks", q, f[0], f[1])
			}
		}
		if strings.ContainsAny(b.Subject, "*> \t") {
			bad("nats_queues: %q: subject %q: Lily publishes to it, so it has no wildcards or blanks", q, b.Subject)
		}
	}
	for _, q := range c.Queues {
		// The rule of nats.CheckQueueName (another module), checked here so
		// that lily lint and the config check refuse what apply would.
		if q.Transport == lily.TransportNATS && (strings.ContainsAny(q.Name, " \t\r\n*>/\\") ||
			strings.HasPrefix(q.Name, ".") || strings.HasSuffix(q.Name, ".") || strings.Contains(q.Name, "..")) {
			bad("queue %q: a nats queue's name is its subject and stream name: use letters, digits, '-', '_' and single dots between them (no blanks, '*', '>', slashes or empty tokens)", q.Name)
		}
	}
	return errs
}
