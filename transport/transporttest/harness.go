// Package transporttest is the conformance suite every Lily transport must
// pass (docs/design.md §11), and a fault-injecting wrapper usable over any
// transport. A transport's test calls Run with a Harness:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, transporttest.Harness{Name: "sqlite", New: ..., DeadLetters: ...})
//	}
//
// Each behaviour is one parallel subtest on its own uniquely named queue,
// driven through the real runtime (lily.Consumer), and each ends by checking
// conservation: every published message is acknowledged, dead-lettered or
// still held, none lost and none invented.
package transporttest

import (
	"context"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// DeadLettersOf turns what a transport's dead-letter destination of queue
// holds (ds, read with err) into the suite's DeadLetters, for a Harness's
// DeadLetters: the reason is Lily's evidence header, else the broker's own
// (x-death, evidence.BrokerReason).
func DeadLettersOf(queue string, ds []*transport.Delivery, err error) ([]DeadLetter, error) {
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, len(ds))
	for i, d := range ds {
		reason, _ := d.Headers[evidence.HeaderReason].(string)
		if reason == "" {
			if r, ok := evidence.BrokerReason(d.Headers); ok {
				reason = string(r)
			}
		}
		out[i] = DeadLetter{Queue: queue, EventID: d.EventID, Key: d.Key, Type: d.Type, Body: d.Body, Headers: d.Headers, Reason: reason}
	}
	return out, nil
}

// DeadLetter is a message held by a transport's dead-letter destination.
type DeadLetter struct {
	Queue   string
	EventID string
	Key     string
	Type    string
	Body    []byte
	Headers transport.Headers
	// Reason is the dead-letter reason as the transport recorded it.
	Reason string
}

// Harness connects the suite to one transport.
type Harness struct {
	// Name is the transport's name in QueueConfig.Transport ("sqlite").
	Name string
	// New returns a transport for one subtest. The suite closes it. New
	// is called from parallel subtests.
	New func(t *testing.T) transport.Transport
	// DeadLetters returns the dead letters of queue, without removing them.
	DeadLetters func(ctx context.Context, tr transport.Transport, queue string) ([]DeadLetter, error)
	// Abandon makes deliveries that a consumer instance received and never
	// settled come back as if that instance died (a lease given back, a
	// channel closed). The broker's delivery count stays raised.
	Abandon func(ctx context.Context, tr transport.Transport, consumer string) error
	// InFlight counts the queue's messages that are neither acknowledged
	// nor dead-lettered. Nil uses transport.InFlightCounter when the
	// transport implements it, else the check is skipped loudly.
	InFlight func(ctx context.Context, tr transport.Transport, queue string) (int64, error)
	// Lease is the visibility timeout of the transports New returns, for
	// lease-based transports (0 otherwise). RunLoad's slow handlers run
	// longer than it, so keep it short (a few hundred milliseconds).
	Lease time.Duration
	// Configure, when set, adjusts every queue configuration the suite
	// builds (Name and Transport already filled in), e.g. to consume a
	// Kafka queue through a share group.
	Configure func(q *lily.QueueConfig)
	// Teardown, when set, removes a subtest's queue after it ended (the
	// transport is still open).
	Teardown func(ctx context.Context, tr transport.Transport, spec transport.QueueSpec) error
}

func (h Harness) inFlight(ctx context.Context, t *testing.T, tr transport.Transport, queue string) (int64, bool) {
	t.Helper()
	if h.InFlight != nil {
		n, err := h.InFlight(ctx, tr, queue)
		if err != nil {
			t.Fatalf("in-flight count of %s: %v", queue, err)
		}
		return n, true
	}
	if c, ok := tr.(transport.InFlightCounter); ok {
		n, err := c.InFlight(ctx, queue)
		if err != nil {
			t.Fatalf("in-flight count of %s: %v", queue, err)
		}
		return n, true
	}
	t.Logf("WARNING: transport %s cannot count in-flight messages: conservation checked without them", h.Name)
	return 0, false
}
