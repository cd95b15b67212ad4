package config

import (
	"fmt"
	"regexp"

	"github.com/lily-mq/lily"
)

// PubSubNames are the Pub/Sub topic and subscription of one queue
// (pubsub_queues); empty fields default to the queue's name.
type PubSubNames struct {
	// Topic the queue's producers publish to. Defaults to the queue name.
	Topic string `toml:"topic" json:"topic,omitempty"`
	// Subscription Lily consumes. Defaults to the queue name.
	Subscription string `toml:"subscription" json:"subscription,omitempty"`
}

// The Pub/Sub settings of Config (fields in config.go's Config):
//
//	pubsub_project               Google Cloud project ID; required with a pubsub queue
//	pubsub_endpoint              host:port of the API or an emulator; defaults to Google's
//	pubsub_insecure              plaintext without credentials (emulator); defaults to false
//	pubsub_ack_deadline_seconds  the lease, 10..600; defaults to 60
//	pubsub_max_delivery_attempts the dead-letter policy's limit, 5..100, above every
//	                             pubsub queue's delivery_limit; defaults to delivery_limit + 2 (at least 5)
//	[pubsub_queues.NAME]         topic = "...", subscription = "..."

// pubsubID is what Pub/Sub accepts as a topic or subscription ID.
var pubsubID = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._~+%-]{2,254}$`)

// PubSubAckDeadline returns pubsub_ack_deadline_seconds, or 60 when unset.
func (c Config) PubSubAckDeadline() int {
	if c.PubSubAckDeadlineSeconds == nil {
		return 60
	}
	return *c.PubSubAckDeadlineSeconds
}

// PubSubMaxAttempts returns the max_delivery_attempts for a queue with
// deliveryLimit: pubsub_max_delivery_attempts, else deliveryLimit + 2, at
// least 5.
func (c Config) PubSubMaxAttempts(deliveryLimit int) int {
	if c.PubSubMaxDeliveryAttempts != nil {
		return *c.PubSubMaxDeliveryAttempts
	}
	return max(deliveryLimit+2, 5)
}

// validatePubSub reports every problem of the Pub/Sub settings.
func (c Config) validatePubSub() []error {
	var errs []error
	var pubsubQueues []lily.QueueConfig
	for _, q := range c.Queues {
		if q.Transport == lily.TransportPubSub {
			pubsubQueues = append(pubsubQueues, q)
		}
	}
	if len(pubsubQueues) > 0 && c.PubSubProject == "" {
		errs = append(errs, fmt.Errorf("%w: pubsub_project is empty but queue %q has transport = \"pubsub\": set pubsub_project to the Google Cloud project ID", ErrInvalidConfig, pubsubQueues[0].Name))
	}
	if n := c.PubSubAckDeadline(); n < 10 || n > 600 {
		errs = append(errs, fmt.Errorf("%w: pubsub_ack_deadline_seconds = %d: must be in 10..600 (Pub/Sub's ack deadline range)", ErrInvalidConfig, n))
	}
	if p := c.PubSubMaxDeliveryAttempts; p != nil && (*p < 5 || *p > 100) {
		errs = append(errs, fmt.Errorf("%w: pubsub_max_delivery_attempts = %d: must be in 5..100 (Pub/Sub's dead-letter policy range)", ErrInvalidConfig, *p))
	}
	for _, q := range pubsubQueues {
		limit := q.Settings().DeliveryLimit
		if n := c.PubSubMaxAttempts(limit); n <= limit || n > 100 {
			errs = append(errs, fmt.Errorf("%w: queue %q: delivery_limit = %d with pubsub_max_delivery_attempts %d: Pub/Sub must allow more deliveries than Lily (at most 100), "+
				"or it dead-letters without Lily's evidence; lower delivery_limit below 99 or raise pubsub_max_delivery_attempts", ErrInvalidConfig, q.Name, limit, n))
		}
	}
	for q, n := range c.PubSubQueues {
		qc, ok := c.Queue(q)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%w: pubsub_queues: %q: no [[queue]] has this name (add one with transport = \"pubsub\", or remove the entry)", ErrInvalidConfig, q))
		case qc.Transport != lily.TransportPubSub:
			errs = append(errs, fmt.Errorf("%w: pubsub_queues: %q: the queue's transport is %q; only a queue with transport = \"pubsub\" has a topic and subscription", ErrInvalidConfig, q, qc.Transport))
		}
		for what, id := range map[string]string{"topic": n.Topic, "subscription": n.Subscription} {
			if id != "" && !pubsubID.MatchString(id) {
				errs = append(errs, fmt.Errorf("%w: pubsub_queues: %q: %s = %q: a Pub/Sub ID is 3..255 characters of letters, digits and - _ . ~ + %%, starting with a letter", ErrInvalidConfig, q, what, id))
			}
		}
	}
	return errs
}
