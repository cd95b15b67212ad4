package nats

import (
	"encoding/json"
	"errors"
	"fmt"
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

// inbox is the reply subject of one consumer instance's pulls on one
// queue, subscribed once and kept for the instance's life (as jetstream's
// Messages iterator keeps one), not subscribed and unsubscribed for each
// pull: a subscription change costs the server a sublist update, and a
// message that reaches a kept inbox after its pull gave up is not lost.
type inbox struct {
	mu  sync.Mutex // one pull at a time
	sub *natsgo.Subscription
}

type inboxKey struct{ queue, consumer string }

// inboxFor returns the inbox of consumer on queue, made on first use.
func (t *Transport) inboxFor(queue, consumer string) *inbox {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := inboxKey{queue, consumer}
	ib := t.inboxes[k]
	if ib == nil {
		ib = &inbox{}
		t.inboxes[k] = ib
	}
	return ib
}

// dropInboxes unsubscribes the inboxes of consumer (on queue, or on every
// queue when queue is ""). A message still queued in one reached this
// instance after its pull gave up: it is NAKed, handed out again at once
// (its delivery is counted; it cannot be undone).
func (t *Transport) dropInboxes(consumer, queue string) (naked int, err error) {
	t.mu.Lock()
	var ibs []*inbox
	for k, ib := range t.inboxes {
		if k.consumer == consumer && (queue == "" || k.queue == queue) {
			ibs = append(ibs, ib)
			delete(t.inboxes, k)
		}
	}
	t.mu.Unlock()
	var errs []error
	for _, ib := range ibs {
		ib.mu.Lock() // a pull running ends first
		if ib.sub != nil {
			for _, m := range queued(ib.sub, -1) {
				if err := m.Nak(); err != nil {
					errs = append(errs, fmt.Errorf("nats: give back a message that reached a closed pull: %w", err))
				} else {
					naked++
				}
			}
			if err := ib.sub.Unsubscribe(); err != nil && !errors.Is(err, natsgo.ErrConnectionClosed) && !errors.Is(err, natsgo.ErrBadSubscription) {
				errs = append(errs, fmt.Errorf("nats: unsubscribe a pull inbox: %w", err))
			}
			ib.sub = nil
		}
		ib.mu.Unlock()
	}
	return naked, errors.Join(errs...)
}

// queued returns up to limit (-1: all) messages already queued on sub
// without waiting, status messages left out.
func queued(sub *natsgo.Subscription, limit int) []*natsgo.Msg {
	var out []*natsgo.Msg
	n, _, err := sub.Pending()
	for ; err == nil && n > 0 && (limit < 0 || len(out) < limit); n-- {
		m, err := sub.NextMsg(time.Second) // queued: returns at once
		if err != nil {
			break
		}
		if !isStatus(m) {
			out = append(out, m)
		}
	}
	return out
}

// isStatus reports a JetStream status message (no message of the stream).
func isStatus(m *natsgo.Msg) bool { return len(m.Data) == 0 && m.Header.Get("Status") != "" }

// pull asks b's consumer for up to n messages for consumer (an instance)
// on queue: those it has at once, else the first to come within wait,
// through the instance's inbox. Messages an earlier pull of the instance
// gave up on (no answer within its margin) come first. A second pull of
// the same instance at the same time gets a reply subject of its own.
func (t *Transport) pull(queue, consumer string, b Binding, n int, wait time.Duration) ([]*natsgo.Msg, error) {
	ib := t.inboxFor(queue, consumer)
	if !ib.mu.TryLock() {
		sub, err := t.nc.SubscribeSync(t.nc.NewInbox())
		if err != nil {
			return nil, err
		}
		defer sub.Unsubscribe()
		return t.pullWith(sub, b, nil, n, wait)
	}
	defer ib.mu.Unlock()
	if ib.sub == nil || !ib.sub.IsValid() {
		sub, err := t.nc.SubscribeSync(t.nc.NewInbox())
		if err != nil {
			return nil, err
		}
		ib.sub = sub
	}
	early := queued(ib.sub, n)
	if len(early) == n {
		return early, nil
	}
	return t.pullWith(ib.sub, b, early, n, wait)
}

// pullWith sends one pull request for n − len(out) messages with sub's
// subject as its reply subject and collects the answer after out. The
// request is no_wait with an expiry, which the server ends itself (408)
// once it has handed out what it had, or at the expiry. jetstream's
// FetchNoWait sends no expiry, and a server (2.9) that counts messages it
// cannot hand out yet (a NAK delay running) keeps such a request open
// after the client stopped listening: the next message it hands out goes
// to nobody, leased for AckWait with its count raised — seen as a retried
// message missing for a minute under load.
func (t *Transport) pullWith(sub *natsgo.Subscription, b Binding, out []*natsgo.Msg, n int, wait time.Duration) ([]*natsgo.Msg, error) {
	expires := max(wait, minExpiry)
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return out, err
	}
	req, _ := json.Marshal(pullRequest{Batch: n - len(out), NoWait: true, Expires: expires})
	if err := t.nc.PublishRequest(jetstream.DefaultAPIPrefix+"CONSUMER.MSG.NEXT."+b.Stream+"."+b.Consumer, sub.Subject, req); err != nil {
		return out, err
	}
	// The server answers by its expiry at the latest; the margin covers a
	// loaded server and network, not the normal case.
	deadline := time.Now().Add(expires + 10*time.Second)
	for len(out) < n {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			if errors.Is(err, natsgo.ErrTimeout) {
				return out, fmt.Errorf("no answer to a pull request within %s", expires+10*time.Second)
			}
			return out, err
		}
		if isStatus(m) {
			switch code := m.Header.Get("Status"); code {
			case "404", "408":
				return out, nil // no (more) messages, or expired
			case "100":
				continue // heartbeat
			default:
				return out, fmt.Errorf("pull request refused: %s %s", code, m.Header.Get("Description"))
			}
		}
		out = append(out, m)
	}
	return out, nil
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
