package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lily-mq/lily/transport"
)

// QueuePlan is one SQS queue 'lily topology apply' declares.
type QueuePlan struct {
	// Queue is the Lily queue it serves.
	Queue string `json:"queue"`
	// Name is the SQS queue name.
	Name string `json:"name"`
	// Role is "main" or "dlq".
	Role string `json:"role"`
	// Attributes are the queue attributes Lily sets; the redrive policy's
	// deadLetterTargetArn is written "arn:…:<dlq name>" (the account is
	// known only on AWS).
	Attributes map[string]string `json:"attributes"`
}

// Plan returns the queues Declare creates for the specs with the given
// visibility timeout (0: the default), or the specs' problems.
func Plan(specs []transport.QueueSpec, visibility time.Duration) ([]QueuePlan, error) {
	if visibility == 0 {
		visibility = DefaultVisibilityTimeout
	}
	var out []QueuePlan
	var errs []error
	for _, q := range specs {
		if err := CheckSpec(q); err != nil {
			errs = append(errs, err)
			continue
		}
		dlq := DeadLetterQueue(q.Name)
		da := map[string]string{"MessageRetentionPeriod": strconv.Itoa(int(MaxRetention / time.Second))}
		ma := map[string]string{"VisibilityTimeout": strconv.Itoa(int(seconds(visibility))),
			"RedrivePolicy": redriveJSON("arn:…:"+QueueName(dlq), MaxReceiveCount(limitOf(q)))}
		if IsFIFO(q.Name) {
			da["FifoQueue"], ma["FifoQueue"] = "true", "true"
		}
		out = append(out, QueuePlan{Queue: q.Name, Name: QueueName(q.Name), Role: "main", Attributes: ma},
			QueuePlan{Queue: q.Name, Name: QueueName(dlq), Role: "dlq", Attributes: da})
	}
	return out, errors.Join(errs...)
}

func limitOf(q transport.QueueSpec) int {
	if q.DeliveryLimit <= 0 {
		return 5
	}
	return q.DeliveryLimit
}

func redriveJSON(arn string, max int) string {
	b, _ := json.Marshal(RedrivePolicy{DeadLetterTargetArn: arn, MaxReceiveCount: max})
	return string(b)
}

// ParseRedrivePolicy reads a RedrivePolicy attribute; SQS writes
// maxReceiveCount as a number or a string.
func ParseRedrivePolicy(s string) (RedrivePolicy, error) {
	var raw struct {
		DeadLetterTargetArn string          `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		return RedrivePolicy{}, fmt.Errorf("redrive policy %q: %w", s, err)
	}
	n, err := strconv.Atoi(strings.Trim(string(raw.MaxReceiveCount), `" `))
	if err != nil {
		return RedrivePolicy{}, fmt.Errorf("redrive policy %q: maxReceiveCount: %w", s, err)
	}
	return RedrivePolicy{DeadLetterTargetArn: raw.DeadLetterTargetArn, MaxReceiveCount: n}, nil
}

// Difference is one way a live queue differs from the plan.
type Difference struct {
	Queue     string `json:"queue"`
	Name      string `json:"name"`
	Attribute string `json:"attribute,omitempty"`
	Want      string `json:"want"`
	Got       string `json:"got"`
}

// String describes the difference.
func (d Difference) String() string {
	if d.Attribute == "" {
		return fmt.Sprintf("sqs queue %s (for %s): %s, want %s", d.Name, d.Queue, d.Got, d.Want)
	}
	return fmt.Sprintf("sqs queue %s (for %s): %s = %s, want %s", d.Name, d.Queue, d.Attribute, d.Got, d.Want)
}

// Verify compares the live queues with the plan: each exists; the main
// queue's visibility timeout, its redrive policy (target the DLQ,
// maxReceiveCount = delivery_limit + 1) and FIFO-ness; the DLQ's FIFO-ness
// and retention, where the server reports it.
func (t *Transport) Verify(ctx context.Context, specs []transport.QueueSpec) ([]Difference, error) {
	plans, err := Plan(specs, t.opts.VisibilityTimeout)
	if err != nil {
		return nil, err
	}
	var out []Difference
	for _, p := range plans {
		name := p.Queue
		if p.Role == "dlq" {
			name = DeadLetterQueue(p.Queue)
		}
		attrs, err := t.Attributes(ctx, name)
		if errors.Is(err, transport.ErrUnknownQueue) {
			out = append(out, Difference{Queue: p.Queue, Name: p.Name, Want: "a queue", Got: "missing"})
			continue
		}
		if err != nil {
			return nil, err
		}
		for k, want := range p.Attributes {
			got, reported := attrs[k]
			switch k {
			case "RedrivePolicy":
				rp, perr := ParseRedrivePolicy(got)
				wantRP, _ := ParseRedrivePolicy(want)
				dlqName := QueueName(DeadLetterQueue(p.Queue))
				if !reported || perr != nil || rp.MaxReceiveCount != wantRP.MaxReceiveCount ||
					(rp.DeadLetterTargetArn != dlqName && !strings.HasSuffix(rp.DeadLetterTargetArn, ":"+dlqName)) {
					out = append(out, Difference{Queue: p.Queue, Name: p.Name, Attribute: k, Want: want, Got: orNone(got)})
				}
			case "MessageRetentionPeriod":
				if reported && got != want {
					out = append(out, Difference{Queue: p.Queue, Name: p.Name, Attribute: k, Want: want, Got: got})
				}
			case "FifoQueue":
				if got != want && (reported || want == "true") {
					out = append(out, Difference{Queue: p.Queue, Name: p.Name, Attribute: k, Want: want, Got: orNone(got)})
				}
			default:
				if got != want {
					out = append(out, Difference{Queue: p.Queue, Name: p.Name, Attribute: k, Want: want, Got: orNone(got)})
				}
			}
		}
	}
	return out, nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Register remembers queue specs (their delivery limits) for a transport
// that did not declare them, e.g. before DrainDeadLetters.
func (t *Transport) Register(specs ...transport.QueueSpec) { t.specs.Register(specs...) }
