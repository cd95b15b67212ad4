package nats

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily/transport"
)

// ObjectPlan is one stream or consumer Declare creates (docs/design.md
// §8.8: the names are a contract).
type ObjectPlan struct {
	// Kind is "stream" or "consumer".
	Kind string `json:"kind"`
	// Name of the stream, or of the consumer.
	Name string `json:"name"`
	// Stream is the stream of a consumer.
	Stream string `json:"stream,omitempty"`
	// Role is what it is for: "queue", "consumer", "dead letters" or
	// "retry records".
	Role string `json:"role"`
	// Queue is the Lily queue it serves ("" for the shared retry stream).
	Queue string `json:"queue,omitempty"`
	// Settings are the settings Declare gives it and Verify checks.
	Settings map[string]string `json:"settings"`
}

// Plan lists what Declare creates for specs with the transport's options,
// without contacting the server: per queue its stream, consumer and
// dead-letter stream (an adopted queue's stream and consumer are checked,
// not created), then the shared retry stream.
func (t *Transport) Plan(specs []transport.QueueSpec) []ObjectPlan {
	var out []ObjectPlan
	for _, q := range specs {
		b := t.QueueBinding(q.Name)
		if _, adopted := t.opts.Queues[q.Name]; adopted {
			checked := map[string]string{"ack_policy": "explicit", "pull": "true"}
			if q.SingleActiveConsumer {
				checked["max_ack_pending"] = "1"
			}
			out = append(out, ObjectPlan{Kind: "consumer", Name: b.Consumer, Stream: b.Stream, Role: "consumer (adopted: checked, not created)", Queue: q.Name,
				Settings: checked})
		} else {
			out = append(out,
				ObjectPlan{Kind: "stream", Name: b.Stream, Role: "queue", Queue: q.Name,
					Settings: map[string]string{"subjects": b.Subject, "retention": t.opts.Retention, "storage": "file", "replicas": strconv.Itoa(t.opts.Replicas)}},
				ObjectPlan{Kind: "consumer", Name: b.Consumer, Stream: b.Stream, Role: "consumer", Queue: q.Name,
					Settings: map[string]string{"ack_policy": "explicit", "pull": "true", "ack_wait": t.opts.AckWait.String(), "max_deliver": "-1",
						"max_ack_pending": strconv.Itoa(t.maxAckPending(q))}})
		}
		dlq := map[string]string{"subjects": DeadLetterSubject(q.Name), "retention": RetentionLimits, "storage": "file", "replicas": strconv.Itoa(t.opts.Replicas)}
		if q.DLQMaxLength > 0 {
			dlq["max_msgs"], dlq["discard"] = strconv.FormatInt(q.DLQMaxLength, 10), "new"
		}
		out = append(out, ObjectPlan{Kind: "stream", Name: DeadLetterStream(q.Name), Role: "dead letters", Queue: q.Name, Settings: dlq})
	}
	if len(specs) > 0 {
		out = append(out, ObjectPlan{Kind: "stream", Name: t.opts.RetryStream, Role: "retry records",
			Settings: map[string]string{"subjects": retrySubjects, "retention": RetentionLimits, "max_msgs_per_subject": "1", "storage": "file",
				"replicas": strconv.Itoa(t.opts.Replicas)}})
	}
	return out
}

// Difference is one way the server differs from the plan.
type Difference struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Stream  string `json:"stream,omitempty"`
	Setting string `json:"setting,omitempty"`
	Want    string `json:"want"`
	Got     string `json:"got"`
}

// String says what differs, e.g. "nats consumer lily on orders_created:
// ack_wait is 5s, want 30s".
func (d Difference) String() string {
	what := "nats " + d.Kind + " " + d.Name
	if d.Stream != "" {
		what += " on " + d.Stream
	}
	if d.Setting == "" {
		return what + ": " + d.Got + ", want " + d.Want
	}
	return fmt.Sprintf("%s: %s is %s, want %s", what, d.Setting, d.Got, d.Want)
}

// Verify compares the plan of specs with the server and returns every
// difference: a missing stream or consumer, or a setting of the plan the
// server has otherwise.
func (t *Transport) Verify(ctx context.Context, specs []transport.QueueSpec) ([]Difference, error) {
	var diffs []Difference
	for _, p := range t.Plan(specs) {
		var got map[string]string
		var err error
		if p.Kind == "stream" {
			got, err = t.streamSettings(ctx, p.Name)
		} else {
			got, err = t.consumerSettings(ctx, p.Stream, p.Name)
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			diffs = append(diffs, Difference{Kind: p.Kind, Name: p.Name, Stream: p.Stream, Want: "exists", Got: "missing"})
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, k := range slices.Sorted(maps.Keys(p.Settings)) {
			if got[k] != p.Settings[k] {
				diffs = append(diffs, Difference{Kind: p.Kind, Name: p.Name, Stream: p.Stream, Setting: k, Want: p.Settings[k], Got: orNone(got[k])})
			}
		}
	}
	return diffs, nil
}

func (t *Transport) streamSettings(ctx context.Context, name string) (map[string]string, error) {
	s, err := t.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	c := s.CachedInfo().Config
	m := map[string]string{"subjects": strings.Join(c.Subjects, ","), "storage": map[jetstream.StorageType]string{jetstream.FileStorage: "file", jetstream.MemoryStorage: "memory"}[c.Storage],
		"replicas": strconv.Itoa(c.Replicas), "max_msgs_per_subject": strconv.FormatInt(c.MaxMsgsPerSubject, 10)}
	switch c.Retention {
	case jetstream.WorkQueuePolicy:
		m["retention"] = RetentionWorkQueue
	case jetstream.LimitsPolicy:
		m["retention"] = RetentionLimits
	default:
		m["retention"] = "interest"
	}
	if c.MaxMsgs > 0 {
		m["max_msgs"] = strconv.FormatInt(c.MaxMsgs, 10)
	}
	if c.Discard == jetstream.DiscardNew {
		m["discard"] = "new"
	}
	return m, nil
}

func (t *Transport) consumerSettings(ctx context.Context, stream, name string) (map[string]string, error) {
	c, err := t.js.Consumer(ctx, stream, name)
	if err != nil {
		return nil, err
	}
	cfg := c.CachedInfo().Config
	m := map[string]string{"ack_wait": cfg.AckWait.String(), "max_deliver": strconv.Itoa(cfg.MaxDeliver),
		"max_ack_pending": strconv.Itoa(cfg.MaxAckPending), "pull": strconv.FormatBool(cfg.DeliverSubject == "")}
	switch cfg.AckPolicy {
	case jetstream.AckExplicitPolicy:
		m["ack_policy"] = "explicit"
	case jetstream.AckAllPolicy:
		m["ack_policy"] = "all"
	default:
		m["ack_policy"] = "none"
	}
	if cfg.AckWait == 0 {
		m["ack_wait"] = (30 * time.Second).String() // the server's default
	}
	return m, nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
