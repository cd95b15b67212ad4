package rabbitmq

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// answer is one passive declare's reply and how long it took.
type answer struct {
	messages, consumers int
	took                time.Duration
}

// TestStatDistrustsSlowZero: a quorum queue whose leader does not count
// within 250 ms answers 0 messages and 0 consumers. Such a zero, slower
// than the broker's wait, is asked again; a fast zero, or any count that
// is not zero, is the queue's.
func TestStatDistrustsSlowZero(t *testing.T) {
	slow, fast := quorumStatTimeout+time.Millisecond, quorumStatTimeout/5
	cases := []struct {
		name          string
		answers       []answer
		wantReady     int64
		wantConsumers int
		wantAsked     int
		unknown       bool
	}{
		{"fast zero", []answer{{0, 0, fast}}, 0, 0, 1, false},
		{"slow count", []answer{{7, 0, slow}}, 7, 0, 1, false},
		{"slow consumers only", []answer{{0, 2, slow}}, 0, 2, 1, false},
		{"slow zero then the count", []answer{{0, 0, slow}, {0, 0, slow}, {8, 1, slow}}, 8, 1, 3, false},
		{"slow zero then a fast zero", []answer{{0, 0, slow}, {0, 0, fast}}, 0, 0, 2, false},
		{"slow zero every time", []answer{{0, 0, slow}, {0, 0, slow}, {0, 0, slow}, {0, 0, slow}, {0, 0, slow}, {5, 0, fast}}, 0, 0, statAttempts, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			asked := 0
			ready, consumers, err := statLoop(context.Background(), "orders", func() (amqp.Queue, time.Duration, error) {
				a := tc.answers[asked]
				asked++
				return amqp.Queue{Name: "orders", Messages: a.messages, Consumers: a.consumers}, a.took, nil
			})
			if tc.unknown {
				if !errors.Is(err, errCountUnknown) {
					t.Fatalf("err = %v, want errCountUnknown", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if ready != tc.wantReady || consumers != tc.wantConsumers || asked != tc.wantAsked {
				t.Errorf("ready %d, consumers %d after %d asks; want %d, %d after %d", ready, consumers, asked, tc.wantReady, tc.wantConsumers, tc.wantAsked)
			}
		})
	}
}

// TestStatStopsWithContext: a cancelled context ends the asking.
func TestStatStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	asked := 0
	_, _, err := statLoop(ctx, "orders", func() (amqp.Queue, time.Duration, error) {
		asked++
		return amqp.Queue{}, quorumStatTimeout, nil
	})
	if !errors.Is(err, context.Canceled) || asked != 1 {
		t.Errorf("err %v after %d asks; want context.Canceled after 1", err, asked)
	}
}
