package plan

import (
	"fmt"
	"math/big"
	"strconv"
	"time"
)

// JetStream's defaults and limits, the same from nats-server 2.9 to 2.14
// (measured on 2.9.10 and 2.14.5 by the transport's TestPlanKnowsTheServersNumbers:
// docs/nats.md).
const (
	// JetStreamDefaultAckWait is a consumer's AckWait when none is set.
	JetStreamDefaultAckWait = 30 * time.Second
	// JetStreamDefaultMaxAckPending is a consumer's MaxAckPending when
	// none is set (Lily declares its consumers with 20,000).
	JetStreamDefaultMaxAckPending = 1000
	// JetStreamDefaultMaxPayload is the server's max_payload when its
	// configuration sets none: 1 MiB, headers included.
	JetStreamDefaultMaxPayload = 1 << 20
	// JetStreamRecordOverhead is what a file-store stream adds to each
	// stored message that has headers, beyond its subject, headers and
	// body: a 22-byte record header, a 4-byte header length and an 8-byte
	// checksum. MaxBytes counts it.
	JetStreamRecordOverhead = 34
)

// JetStreamParams describes a JetStream consumer, the retries it makes
// and the stream its dead letters go to. Zero means "not given" for the
// optional fields.
type JetStreamParams struct {
	// Rate is the arrival rate at the consumer, messages per second; >= 0.
	Rate float64
	// MaxDeliver is the consumer's MaxDeliver (for a Lily queue, whose
	// consumer has none, its delivery_limit: Lily dead-letters at it);
	// 0 or -1: unlimited.
	MaxDeliver int
	// AckWait is the consumer's AckWait; 0 takes JetStreamDefaultAckWait.
	AckWait time.Duration
	// BackOff is the consumer's BackOff: the wait after delivery n is
	// BackOff[min(n−1, len−1)], and BackOff[0] replaces AckWait.
	BackOff []time.Duration
	// HandlerTime is how long a handler holds a healthy message.
	HandlerTime time.Duration
	// MaxAckPending is the consumer's MaxAckPending; 0 takes
	// JetStreamDefaultMaxAckPending, -1 is unlimited.
	MaxAckPending int
	// Retries are the retry delays the consumer asks with NakWithDelay
	// (Lily's schedule); with Outage they give the messages that wait out
	// a delay, each holding a MaxAckPending slot.
	Retries Schedule
	// Outage is a dependency outage during which every attempt fails.
	Outage time.Duration
	// MessageBytes is a message's size, headers included.
	MessageBytes int64
	// MaxPayload is the server's max_payload; 0 takes
	// JetStreamDefaultMaxPayload.
	MaxPayload int64
	// DeadLetterRate is the dead letters per second into the dead-letter
	// stream; >= 0.
	DeadLetterRate float64
	// DLQSubject is the dead-letter stream's subject (its length counts
	// toward MaxBytes), e.g. "lily.dlq.orders.created".
	DLQSubject string
	// DLQMaxAge, DLQMaxMsgs and DLQMaxBytes are the dead-letter stream's
	// limits; 0 (or -1) is no limit.
	DLQMaxAge   time.Duration
	DLQMaxMsgs  int64
	DLQMaxBytes int64
	// DLQDiscardNew is the stream's discard policy: true refuses new
	// messages once a limit is reached (Lily's dead-letter streams with
	// dlq_max_length), false removes the oldest.
	DLQDiscardNew bool
}

// JetStreamResult is what a JetStream consumer does with failures, and how
// long its dead letters stay.
type JetStreamResult struct {
	// LeaseS is the lease of a first delivery: BackOff[0] when BackOff is
	// set (it replaces AckWait), else AckWait.
	LeaseS float64 `json:"lease_s"`
	// HandlerOutlivesLease: a healthy handler runs past the lease, so the
	// message is delivered again while it runs unless the consumer sends
	// InProgress (Lily does).
	HandlerOutlivesLease bool `json:"handler_outlives_lease"`
	// BackOffRefused: MaxDeliver is not above the BackOff's length; a
	// server up to 2.10.2x refuses the consumer ("max deliver is required
	// to be > length of backoff values"), a later one only when MaxDeliver
	// is below the length: refused here in both cases, so that what the
	// plan accepts every supported server does.
	BackOffRefused bool `json:"backoff_refused"`
	// RedeliveryWaitsS are the waits after each delivery of a message that
	// is never acknowledged (crash-type poison, or a handler that never
	// answers), up to MaxDeliver; without a limit, the first
	// len(BackOff)+1 (the last repeats forever).
	RedeliveryWaitsS []float64 `json:"redelivery_waits_s"`
	// PoisonDeadLetteredAfterS is the sum of the waits: from its first
	// delivery until the server gives up on a poison message (its
	// MAX_DELIVERIES advisory; for a Lily queue the last lease before Lily
	// dead-letters it). Omitted without MaxDeliver: it is never given up.
	PoisonDeadLetteredAfterS *float64 `json:"poison_dead_lettered_after_s,omitempty"`
	// MaxAckPending is the consumer's limit (-1: unlimited).
	MaxAckPending int `json:"max_ack_pending"`
	// AckPendingNeeded is λ·(min(O, S) + handler time): the messages
	// unacknowledged at the end of the outage, leased to a handler or
	// waiting out a NAK delay. Omitted without Outage and Retries.
	AckPendingNeeded *float64 `json:"ack_pending_needed,omitempty"`
	// AckPendingFullAfterS is MaxAckPending/λ when AckPendingNeeded is
	// over MaxAckPending: after that much of the outage the server hands
	// out no new message until a delayed one is settled.
	AckPendingFullAfterS *float64 `json:"ack_pending_full_after_s,omitempty"`
	// MaxPayload is the server's limit on one message, headers included.
	MaxPayload int64 `json:"max_payload"`
	// PayloadHeadroomBytes is MaxPayload − MessageBytes: what Lily's
	// evidence headers on a dead-letter copy may add before the server
	// refuses it. Omitted without MessageBytes.
	PayloadHeadroomBytes *int64 `json:"payload_headroom_bytes,omitempty"`
	// DLQStoredBytes is one dead letter's size in the stream: MessageBytes
	// + the subject + JetStreamRecordOverhead.
	DLQStoredBytes int64 `json:"dlq_stored_bytes,omitempty"`
	// DLQFullAfterS is how long the dead-letter stream takes to reach
	// MaxMsgs or MaxBytes at DeadLetterRate, with nothing removed (for a
	// Lily queue: how long 'lily serve' may stop draining it). Omitted
	// without such a limit or rate.
	DLQFullAfterS *float64 `json:"dlq_full_after_s,omitempty"`
	// DLQLimitedBy is the limit that decides how long a dead letter stays:
	// "max_age", "max_msgs", "max_bytes", or "none".
	DLQLimitedBy string `json:"dlq_limited_by"`
	// DeadLetterStaysS is how long a dead letter stays in the stream:
	// with DiscardNew MaxAge (a full stream refuses new ones instead), else
	// the first limit reached. Omitted when nothing removes it.
	DeadLetterStaysS *float64 `json:"dead_letter_stays_s,omitempty"`
	// DLQRefusesNew: DiscardNew with a MaxMsgs or MaxBytes: once full, the
	// stream refuses new dead letters (Lily stores them in the catalog
	// under FailRefused, or keeps the original).
	DLQRefusesNew bool `json:"dlq_refuses_new"`
}

// JetStream returns a consumer's numbers. The server's rules (2.9): a
// BackOff replaces AckWait with BackOff[0] and sets the wait after
// delivery n to BackOff[min(n−1, len−1)]; MaxDeliver must exceed the
// BackOff's length; a message waiting out a NAK delay holds a
// MaxAckPending slot. Example: MaxDeliver 5, BackOff 1s,5s,30s, 20 ms
// handlers → waits 1, 5, 30, 30, 30 s: a poison message is given up 96 s
// after its first delivery.
func JetStream(p JetStreamParams) (JetStreamResult, error) {
	if err := checkRate("rate", p.Rate); err != nil {
		return JetStreamResult{}, err
	}
	if err := checkRate("dead-letter-rate", p.DeadLetterRate); err != nil {
		return JetStreamResult{}, err
	}
	for _, d := range []struct {
		f string
		d time.Duration
	}{{"ack-wait", p.AckWait}, {"handler-time", p.HandlerTime}, {"outage", p.Outage}, {"dlq-max-age", p.DLQMaxAge}} {
		if err := checkDuration(d.f, d.d, false); err != nil {
			return JetStreamResult{}, err
		}
	}
	for i, d := range p.BackOff {
		if err := checkDuration("backoff", d, true); err != nil {
			return JetStreamResult{}, inputErrorf("backoff", d.String(), "entry %d must be > 0", i+1)
		}
	}
	for _, n := range []struct {
		f string
		v int64
	}{{"message-bytes", p.MessageBytes}, {"max-payload", p.MaxPayload}} {
		if n.v < 0 {
			return JetStreamResult{}, inputErrorf(n.f, strconv.FormatInt(n.v, 10), "must not be negative (bytes)")
		}
	}
	if p.MaxDeliver < -1 {
		return JetStreamResult{}, inputErrorf("max-deliver", strconv.Itoa(p.MaxDeliver), "must be >= 1, or -1 (unlimited)")
	}
	if p.MaxAckPending < -1 {
		return JetStreamResult{}, inputErrorf("max-ack-pending", strconv.Itoa(p.MaxAckPending), "must be >= 1, or -1 (unlimited)")
	}
	if p.AckWait == 0 {
		p.AckWait = JetStreamDefaultAckWait
	}
	if p.MaxAckPending == 0 {
		p.MaxAckPending = JetStreamDefaultMaxAckPending
	}
	if p.MaxPayload == 0 {
		p.MaxPayload = JetStreamDefaultMaxPayload
	}
	lease := func(n int) time.Duration { // the wait after delivery n
		if len(p.BackOff) == 0 {
			return p.AckWait
		}
		return p.BackOff[min(n-1, len(p.BackOff)-1)]
	}
	r := JetStreamResult{LeaseS: float(seconds(lease(1))), MaxAckPending: p.MaxAckPending, MaxPayload: p.MaxPayload, DLQLimitedBy: "none"}
	r.HandlerOutlivesLease = p.HandlerTime > lease(1)
	limited := p.MaxDeliver > 0
	r.BackOffRefused = limited && p.MaxDeliver <= len(p.BackOff)
	waits := len(p.BackOff) + 1
	if limited {
		waits = p.MaxDeliver
	}
	total := new(big.Rat)
	for n := 1; n <= waits; n++ {
		w := seconds(lease(n))
		total.Add(total, w)
		r.RedeliveryWaitsS = append(r.RedeliveryWaitsS, float(w))
	}
	if limited {
		r.PoisonDeadLetteredAfterS = ptrTo(float(total))
	}
	if p.Outage > 0 && len(p.Retries.Delays) > 0 {
		lambda := exact(p.Rate)
		need := mul(lambda, add(minRat(seconds(p.Outage), p.Retries.span()), seconds(p.HandlerTime)))
		r.AckPendingNeeded = ptrTo(float(need))
		if mp := integer(int64(p.MaxAckPending)); p.MaxAckPending > 0 && p.Rate > 0 && need.Cmp(mp) > 0 {
			r.AckPendingFullAfterS = ptrTo(float(quo(mp, lambda)))
		}
	}
	if p.MessageBytes > 0 {
		h := p.MaxPayload - p.MessageBytes
		r.PayloadHeadroomBytes = &h
		r.DLQStoredBytes = p.MessageBytes + int64(len(p.DLQSubject)) + JetStreamRecordOverhead
	}
	jetStreamRetention(p, &r)
	return r, nil
}

// jetStreamRetention fills the dead-letter stream's numbers of r.
func jetStreamRetention(p JetStreamParams, r *JetStreamResult) {
	var full *big.Rat
	fullBy := ""
	if p.DeadLetterRate > 0 {
		rate := exact(p.DeadLetterRate)
		if p.DLQMaxMsgs > 0 {
			full, fullBy = quo(integer(p.DLQMaxMsgs), rate), "max_msgs"
		}
		if p.DLQMaxBytes > 0 && r.DLQStoredBytes > 0 {
			byBytes := quo(integer(p.DLQMaxBytes), mul(rate, integer(r.DLQStoredBytes)))
			if full == nil || byBytes.Cmp(full) < 0 {
				full, fullBy = byBytes, "max_bytes"
			}
		}
	}
	if full != nil {
		r.DLQFullAfterS = ptrTo(float(full))
	}
	r.DLQRefusesNew = p.DLQDiscardNew && (p.DLQMaxMsgs > 0 || p.DLQMaxBytes > 0)
	age := seconds(p.DLQMaxAge)
	switch {
	case p.DLQDiscardNew || full == nil:
		// Full, a DiscardNew stream refuses new messages and removes none:
		// only MaxAge removes a dead letter.
		if p.DLQMaxAge > 0 {
			r.DLQLimitedBy, r.DeadLetterStaysS = "max_age", ptrTo(float(age))
		}
	case p.DLQMaxAge > 0 && age.Cmp(full) <= 0:
		r.DLQLimitedBy, r.DeadLetterStaysS = "max_age", ptrTo(float(age))
	default:
		r.DLQLimitedBy, r.DeadLetterStaysS = fullBy, ptrTo(float(full))
	}
}

// Chart returns the time since its first delivery (y) at which a message
// that is never acknowledged is delivered again (x: the delivery number),
// the server giving it up at the last point when MaxDeliver is set.
func (r JetStreamResult) Chart() Chart {
	pts := []Point{{X: 1, Y: 0}}
	at := new(big.Rat)
	for i, w := range r.RedeliveryWaitsS {
		at.Add(at, exact(w))
		pts = append(pts, Point{X: float64(i + 2), Y: float(at)})
	}
	c := Chart{
		Title:    "When JetStream delivers an unacknowledged message again",
		Subtitle: fmt.Sprintf("lease %s s; waits %v s", fmtNumber(r.LeaseS), r.RedeliveryWaitsS),
		XLabel:   "delivery (the last point: the server gives up)",
		YLabel:   "seconds since the first delivery",
		Series:   []Series{{Name: "delivery", Points: pts}},
		MarkName: "given up",
	}
	if r.PoisonDeadLetteredAfterS != nil {
		last := pts[len(pts)-1] // the MAX_DELIVERIES advisory, not a delivery
		c.Marks = []Mark{{X: last.X, Y: last.Y, Label: fmt.Sprintf("given up after %s s", fmtNumber(last.Y))}}
	}
	return c
}

func ptrTo[T any](v T) *T { return &v }
