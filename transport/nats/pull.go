package nats

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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

// pull asks b's consumer for up to n messages: those it has at once, else
// the first to come within wait. Each pull has a reply subscription of its
// own, as jetstream's Fetch has: one kept per consumer instance (as its
// Messages iterator keeps one) was tried, and under load pulls then went
// without an answer for the whole margin (docs/nats.md).
func (t *Transport) pull(b Binding, n int, wait time.Duration) ([]*natsgo.Msg, error) {
	sub, err := t.nc.SubscribeSync(t.nc.NewInbox())
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	return t.pullWith(sub, b, n, wait)
}

// pullWith sends one pull request for n messages with sub's subject as
// its reply subject and collects the answer. The
// request is no_wait with an expiry, which the server ends itself (408)
// once it has handed out what it had, or at the expiry. jetstream's
// FetchNoWait sends no expiry, and a server (2.9) that counts messages it
// cannot hand out yet (a NAK delay running) keeps such a request open
// after the client stopped listening: the next message it hands out goes
// to nobody, leased for AckWait with its count raised — seen as a retried
// message missing for a minute under load.
func (t *Transport) pullWith(sub *natsgo.Subscription, b Binding, n int, wait time.Duration) ([]*natsgo.Msg, error) {
	expires := max(wait, minExpiry)
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, err
	}
	req, _ := json.Marshal(pullRequest{Batch: n, NoWait: true, Expires: expires})
	if err := t.nc.PublishRequest(jetstream.DefaultAPIPrefix+"CONSUMER.MSG.NEXT."+b.Stream+"."+b.Consumer, sub.Subject, req); err != nil {
		return nil, err
	}
	var out []*natsgo.Msg
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
