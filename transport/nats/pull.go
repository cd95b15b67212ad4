package nats

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pullRequest is JetStream's CONSUMER.MSG.NEXT request.
type pullRequest struct {
	Batch   int           `json:"batch"`
	NoWait  bool          `json:"no_wait,omitempty"`
	Expires time.Duration `json:"expires,omitempty"`
}

// minExpiry bounds every pull request on the server's side.
const minExpiry = 10 * time.Millisecond

// isStatus reports a JetStream status message (no message of the stream).
func isStatus(m *natsgo.Msg) bool { return len(m.Data) == 0 && m.Header.Get("Status") != "" }

// pullKey names the pull requests of one consumer instance on one queue.
type pullKey struct{ consumer, queue string }

// inbox is the reply subscription of every pull request of one consumer
// instance on one queue, kept until the consumer stops. A 2.9 server
// sometimes answers a request long after its expiry (a NAK delay running,
// MaxAckPending reached), and sometimes never: so a receive that waited
// long enough sends a new request the next time, and whatever the server
// sends to any earlier one still arrives here and is handed out — never
// to nobody, leased until AckWait with its count raised (docs/nats.md).
// What arrives between receives waits in buf, its lease extended every
// fifth of AckWait, for the next receive.
type inbox struct {
	sub *natsgo.Subscription

	mu      sync.Mutex
	buf     []*natsgo.Msg
	ends    int           // 404/408 statuses seen: requests the server ended
	err     error         // a refusal (another status), for the next receive
	notify  chan struct{} // signalled on every arrival
	keeping bool          // a lease keeper runs for buf
	dropped bool
}

// pullMargin is how long past a request's expiry a receive waits for the
// server's answer before it returns what it has; what comes later arrives
// in the inbox for the next receive.
const pullMargin = 2 * time.Second

// inbox returns consumer's inbox on queue, subscribing it the first time.
func (t *Transport) inbox(k pullKey) (*inbox, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ib := t.pulls[k]; ib != nil {
		return ib, nil
	}
	ib := &inbox{notify: make(chan struct{}, 1)}
	sub, err := t.nc.Subscribe(t.nc.NewInbox(), func(m *natsgo.Msg) { t.arrived(ib, m) })
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	ib.sub = sub
	t.pulls[k] = ib
	return ib, nil
}

// arrived takes one message of the inbox's subscription.
func (t *Transport) arrived(ib *inbox, m *natsgo.Msg) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	if isStatus(m) {
		switch code := m.Header.Get("Status"); code {
		case "404", "408":
			ib.ends++
		case "100": // heartbeat
			return
		default:
			ib.err = fmt.Errorf("pull request refused: %s %s", code, m.Header.Get("Description"))
		}
	} else if ib.dropped {
		// The consumer stopped: given back at once rather than left leased.
		if err := m.Nak(); err != nil {
			t.opts.Logger.Warn("nats: giving back a message that reached a stopped consumer failed; it comes back after AckWait", "subject", m.Subject, "err", err)
		}
		return
	} else {
		ib.buf = append(ib.buf, m)
		if !ib.keeping {
			ib.keeping = true
			go t.keepInbox(ib)
		}
	}
	select {
	case ib.notify <- struct{}{}:
	default:
	}
}

// keepInbox extends the leases of what waits in ib's buffer, every fifth
// of AckWait, until the buffer is empty.
func (t *Transport) keepInbox(ib *inbox) {
	for {
		time.Sleep(t.opts.AckWait / 5) // the lease's own clock: no event to wait for
		t.mu.Lock()
		closed := t.closed
		t.mu.Unlock()
		ib.mu.Lock()
		ms := slices.Clone(ib.buf)
		if len(ms) == 0 || ib.dropped || closed {
			ib.keeping = false
			ib.mu.Unlock()
			return
		}
		ib.mu.Unlock()
		for _, m := range ms {
			if err := t.nc.Publish(m.Reply, ackProgress); err != nil {
				t.opts.Logger.Warn("nats: extending the lease of a message waiting for a receive failed", "subject", m.Subject, "err", err)
			}
		}
	}
}

// take returns and removes what ib holds, and the refusal it saw.
func (ib *inbox) take() ([]*natsgo.Msg, error) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ms, err := ib.buf, ib.err
	ib.buf, ib.err = nil, nil
	return ms, err
}

// pull asks b's consumer for up to n messages for consumer on queue: what
// its inbox holds already (late answers to earlier requests) if anything,
// else those the server has at once, else the first to come within wait.
// The request is no_wait with an expiry, which the server ends itself
// (408) once it has handed out what it had, or at the expiry. jetstream's
// FetchNoWait sends no expiry, and a server (2.9) that counts messages it
// cannot hand out yet (a NAK delay running) keeps such a request open.
// The receive waits for the answer up to the expiry and pullMargin; what
// comes later waits in the inbox. It may return more than n: messages of
// earlier requests.
func (t *Transport) pull(b Binding, consumer, queue string, n int, wait time.Duration) ([]*natsgo.Msg, error) {
	ib, err := t.inbox(pullKey{consumer, queue})
	if err != nil {
		return nil, err
	}
	if ms, err := ib.take(); len(ms) > 0 || err != nil {
		return ms, err
	}
	ib.mu.Lock()
	ends := ib.ends
	ib.mu.Unlock()
	expires := max(wait, minExpiry)
	req, _ := json.Marshal(pullRequest{Batch: n, NoWait: true, Expires: expires})
	if err := t.nc.PublishRequest(jetstream.DefaultAPIPrefix+"CONSUMER.MSG.NEXT."+b.Stream+"."+b.Consumer, ib.sub.Subject, req); err != nil {
		return nil, err
	}
	timer := time.NewTimer(expires + pullMargin)
	defer timer.Stop()
	for {
		ib.mu.Lock()
		got, ended, refused := len(ib.buf), ib.ends > ends, ib.err != nil
		ib.mu.Unlock()
		if got >= n || ended || refused {
			return ib.take()
		}
		select {
		case <-ib.notify:
		case <-timer.C:
			// No end of the request yet: what it brings later is handed
			// out by a later receive.
			return ib.take()
		}
	}
}

// dropPulls ends the inboxes of consumer (on every queue when queue is
// "", of every consumer when consumer is "" too): what waits in them is
// NAKed, to be handed out again at once (its count raised) rather than
// left leased until AckWait, and so is what reaches them until the server
// has seen the unsubscription.
func (t *Transport) dropPulls(consumer, queue string) {
	var ibs []*inbox
	t.mu.Lock()
	for k, ib := range t.pulls {
		if (consumer == "" || k.consumer == consumer) && (queue == "" || k.queue == queue) {
			ibs = append(ibs, ib)
			delete(t.pulls, k)
		}
	}
	t.mu.Unlock()
	for _, ib := range ibs {
		ib.sub.Unsubscribe()
		ib.mu.Lock()
		ib.dropped = true
		ms := ib.buf
		ib.buf = nil
		ib.mu.Unlock()
		for _, m := range ms {
			if err := m.Nak(); err != nil {
				t.opts.Logger.Warn("nats: giving back a message a stopped consumer did not receive failed; it comes back after AckWait", "subject", m.Subject, "err", err)
			}
		}
	}
}

// JetStream's acknowledgement bodies.
var (
	ackAck      = []byte("+ACK")
	ackNak      = []byte("-NAK")
	ackProgress = []byte("+WPI")
	ackTerm     = []byte("+TERM")
)

// ack sends an acknowledgement body to a delivery's reply subject.
func (t *Transport) ack(rc *receipt, body []byte) error {
	return t.nc.Publish(rc.msg.Reply, body)
}

// nak NAKs a delivery, to be handed out again after delay (0: at once).
func (t *Transport) nak(rc *receipt, delay time.Duration) error {
	if delay <= 0 {
		return t.ack(rc, ackNak)
	}
	return t.ack(rc, []byte(`-NAK {"delay": `+strconv.FormatInt(delay.Nanoseconds(), 10)+`}`))
}
