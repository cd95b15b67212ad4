package plan

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// TestJetStreamRedeliveries: a BackOff replaces AckWait with its first
// entry and its last entry repeats up to MaxDeliver; the server refuses a
// MaxDeliver not above the BackOff's length; without MaxDeliver a poison
// message is never given up.
func TestJetStreamRedeliveries(t *testing.T) {
	r, err := JetStream(JetStreamParams{MaxDeliver: 5, AckWait: time.Minute, BackOff: []time.Duration{time.Second, 5 * time.Second, 30 * time.Second},
		HandlerTime: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	exactly(t, "lease", r.LeaseS, 1)
	if want := []float64{1, 5, 30, 30, 30}; !reflect.DeepEqual(r.RedeliveryWaitsS, want) {
		t.Errorf("waits %v, want %v", r.RedeliveryWaitsS, want)
	}
	if r.PoisonDeadLetteredAfterS == nil || *r.PoisonDeadLetteredAfterS != 96 {
		t.Errorf("poison given up after %v, want 96 s", r.PoisonDeadLetteredAfterS)
	}
	if r.HandlerOutlivesLease || r.BackOffRefused || r.MaxAckPending != JetStreamDefaultMaxAckPending || r.MaxPayload != 1048576 {
		t.Errorf("result %+v: want a 20 ms handler inside the lease, BackOff accepted, the server's defaults", r)
	}

	r, err = JetStream(JetStreamParams{MaxDeliver: 3, BackOff: []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, HandlerTime: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !r.BackOffRefused || !r.HandlerOutlivesLease {
		t.Errorf("MaxDeliver 3 with 3 BackOff entries and a 2 s handler: %+v, want refused and outliving the 1 s lease", r)
	}

	r, err = JetStream(JetStreamParams{MaxDeliver: -1})
	if err != nil {
		t.Fatal(err)
	}
	if r.PoisonDeadLetteredAfterS != nil || !reflect.DeepEqual(r.RedeliveryWaitsS, []float64{30}) || r.LeaseS != 30 {
		t.Errorf("unlimited with the default AckWait: %+v, want a 30 s wait repeating, never given up", r)
	}
}

// TestJetStreamAckPendingInAnOutage: the worked outage of design §10 (2000/s,
// 10 minutes, delays 30, 60, 120, 240 s) on NATS, where every message
// waiting out a NAK delay holds a MaxAckPending slot: 2000·(450 + 0.05) =
// 900,100 needed, so Lily's 20,000 are full after 10 s of the outage.
func TestJetStreamAckPendingInAnOutage(t *testing.T) {
	backoff, err := Backoff(5, 30000, 240000)
	if err != nil {
		t.Fatal(err)
	}
	r, err := JetStream(JetStreamParams{Rate: 2000, Outage: 10 * time.Minute, Retries: backoff, HandlerTime: 50 * time.Millisecond, MaxAckPending: 20000})
	if err != nil {
		t.Fatal(err)
	}
	if r.AckPendingNeeded == nil || *r.AckPendingNeeded != 900100 || r.AckPendingFullAfterS == nil || *r.AckPendingFullAfterS != 10 {
		t.Errorf("ack pending needed %v, full after %v s: want 900100 and 10", r.AckPendingNeeded, r.AckPendingFullAfterS)
	}
	r, err = JetStream(JetStreamParams{Rate: 10, Outage: time.Minute, Retries: backoff, MaxAckPending: -1})
	if err != nil {
		t.Fatal(err)
	}
	if r.AckPendingNeeded == nil || *r.AckPendingNeeded != 600 || r.AckPendingFullAfterS != nil {
		t.Errorf("unlimited MaxAckPending: needed %v, full after %v: want 600, never full", r.AckPendingNeeded, r.AckPendingFullAfterS)
	}
}

// TestJetStreamDeadLetterRetention: how long a dead letter stays, and how
// long the stream takes to fill, at 1,728 dead letters a day (0.02/s) of
// 2,048 bytes on lily.dlq.orders.created: 2,048 + 23 + 34 = 2,105 bytes
// stored each.
func TestJetStreamDeadLetterRetention(t *testing.T) {
	base := JetStreamParams{DeadLetterRate: 0.02, MessageBytes: 2048, DLQSubject: "lily.dlq.orders.created"}
	tests := []struct {
		name       string
		mod        func(*JetStreamParams)
		full, stay *float64
		by         string
		refuses    bool
	}{
		{"Lily's: dlq_max_length 10000, discard new", func(p *JetStreamParams) { p.DLQMaxMsgs, p.DLQDiscardNew = 10000, true },
			ptr(500000.0), nil, "none", true},
		{"discard new with max age", func(p *JetStreamParams) { p.DLQMaxMsgs, p.DLQDiscardNew, p.DLQMaxAge = 10000, true, 168*time.Hour },
			ptr(500000.0), ptr(604800.0), "max_age", true},
		{"max age before 100 MiB", func(p *JetStreamParams) { p.DLQMaxAge, p.DLQMaxBytes = 168*time.Hour, 100<<20 },
			ptr(104857600 / (0.02 * 2105)), ptr(604800.0), "max_age", false},
		{"10 MiB before max age", func(p *JetStreamParams) { p.DLQMaxAge, p.DLQMaxBytes = 168*time.Hour, 10<<20 },
			ptr(10485760 / (0.02 * 2105)), ptr(10485760 / (0.02 * 2105)), "max_bytes", false},
		{"max msgs before max bytes", func(p *JetStreamParams) { p.DLQMaxMsgs, p.DLQMaxBytes = 1000, 100<<20 },
			ptr(50000.0), ptr(50000.0), "max_msgs", false},
		{"no limits", func(*JetStreamParams) {}, nil, nil, "none", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := base
			tc.mod(&p)
			r, err := JetStream(p)
			if err != nil {
				t.Fatal(err)
			}
			if r.DLQStoredBytes != 2105 || *r.PayloadHeadroomBytes != 1048576-2048 {
				t.Errorf("stored %d bytes, headroom %d: want 2105 and %d", r.DLQStoredBytes, *r.PayloadHeadroomBytes, 1048576-2048)
			}
			if !reflect.DeepEqual(r.DLQFullAfterS, tc.full) || !reflect.DeepEqual(r.DeadLetterStaysS, tc.stay) || r.DLQLimitedBy != tc.by || r.DLQRefusesNew != tc.refuses {
				t.Errorf("full after %v, stays %v, limited by %s, refuses new %v: want %v, %v, %s, %v",
					deref(r.DLQFullAfterS), deref(r.DeadLetterStaysS), r.DLQLimitedBy, r.DLQRefusesNew, deref(tc.full), deref(tc.stay), tc.by, tc.refuses)
			}
		})
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestJetStreamInputErrors(t *testing.T) {
	for _, tc := range []struct {
		field string
		p     JetStreamParams
	}{
		{"rate", JetStreamParams{Rate: -1}},
		{"dead-letter-rate", JetStreamParams{DeadLetterRate: -1}},
		{"ack-wait", JetStreamParams{AckWait: -time.Second}},
		{"backoff", JetStreamParams{BackOff: []time.Duration{time.Second, 0}}},
		{"max-deliver", JetStreamParams{MaxDeliver: -2}},
		{"max-ack-pending", JetStreamParams{MaxAckPending: -5}},
		{"message-bytes", JetStreamParams{MessageBytes: -1}},
	} {
		_, err := JetStream(tc.p)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%+v: error %v, want an InputError on %s", tc.p, err, tc.field)
		}
	}
}
