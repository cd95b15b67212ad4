package nats

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/nats/natstest"
)

// fakeConsumer answers the pull requests of one stream and consumer name
// on the test server in the test's stead (a core subscription on the
// request subject: no such stream exists, so JetStream does not answer),
// so that a test decides when and how each request is answered.
type fakeConsumer struct {
	t    *testing.T
	nc   *natsgo.Conn
	reqs *natsgo.Subscription
	b    Binding
}

func newFakeConsumer(t *testing.T, url string) *fakeConsumer {
	t.Helper()
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b := Binding{Stream: fmt.Sprintf("fakepull_%08x", rand.Uint32()), Consumer: "lily"}
	reqs, err := nc.SubscribeSync(jetstream.DefaultAPIPrefix + "CONSUMER.MSG.NEXT." + b.Stream + "." + b.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &fakeConsumer{t: t, nc: nc, reqs: reqs, b: b}
}

// requests returns how many pull requests reached the fake so far: after
// tr's flush and its own, every request tr sent before is counted.
func (f *fakeConsumer) requests(tr *Transport) int {
	f.t.Helper()
	if err := tr.nc.Flush(); err != nil {
		f.t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		f.t.Fatal(err)
	}
	n, _, err := f.reqs.Pending()
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// next takes the oldest request the fake has not answered yet.
func (f *fakeConsumer) next() *natsgo.Msg {
	f.t.Helper()
	m, err := f.reqs.NextMsg(10 * time.Second)
	if err != nil {
		f.t.Fatalf("no pull request reached the fake consumer: %v", err)
	}
	return m
}

// send answers req with a message (body) or, with status set, a status.
func (f *fakeConsumer) send(req *natsgo.Msg, body, status string) {
	f.t.Helper()
	m := &natsgo.Msg{Subject: req.Reply, Header: natsgo.Header{}}
	if status != "" {
		m.Header.Set("Status", status)
	} else {
		m.Data = []byte(body)
		m.Reply = "fake.ack." + body
	}
	if err := f.nc.PublishMsg(m); err != nil {
		f.t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		f.t.Fatal(err)
	}
}

// TestPullInbox: a pull request the server has not answered when a
// receive stops waiting is not abandoned: its late answer arrives in the
// consumer instance's inbox, waits there with its lease extended, and the
// next receive hands it out without sending another request — never to
// nobody, leased until AckWait with its count raised (docs/nats.md). A
// request the server ends (408) ends the receive's wait. A stopping
// consumer NAKs what waits in its inbox and drops it.
func TestPullInbox(t *testing.T) {
	url := natstest.URL(t)
	tr, err := Open(Options{URL: url, AckWait: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	f := newFakeConsumer(t, url)
	acks, err := f.nc.SubscribeSync("fake.ack.>")
	if err != nil {
		t.Fatal(err)
	}
	key := pullKey{"c1", "q"}

	// Not answered within the receive's wait: nothing, no error.
	msgs, err := tr.pull(f.b, "c1", "q", 2, minExpiry)
	if err != nil || len(msgs) != 0 {
		t.Fatalf("unanswered pull: %d messages, %v; want none and no error", len(msgs), err)
	}
	req := f.next()
	ib := tr.kept(key)
	if ib == nil || req.Reply != ib.sub.Subject {
		t.Fatal("the request's reply subject is not the consumer's inbox")
	}

	// Answered late: the message waits in the inbox, its lease extended.
	f.send(req, "late-1", "")
	waittest.For(t, "the late answer in the inbox", func() bool { return ib.waiting() == 1 })
	if m, err := acks.NextMsg(10 * time.Second); err != nil || m.Subject != "fake.ack.late-1" || string(m.Data) != string(ackProgress) {
		t.Fatalf("no lease extension of the waiting message: %v %v", m, err)
	}
	// The next receive hands it out and sends no request.
	msgs, err = tr.pull(f.b, "c1", "q", 2, minExpiry)
	if err != nil || len(msgs) != 1 || string(msgs[0].Data) != "late-1" {
		t.Fatalf("pull after the late answer: %d messages, %v; want late-1", len(msgs), err)
	}
	if n := f.requests(tr); n != 0 {
		t.Fatalf("%d new pull requests while the inbox held a message, want none", n)
	}

	// A request the server ends (408) ends the receive.
	done := make(chan error, 1)
	go func() {
		ms, err := tr.pull(f.b, "c1", "q", 2, time.Minute)
		if err == nil && len(ms) != 0 {
			err = fmt.Errorf("%d messages, want none", len(ms))
		}
		done <- err
	}()
	f.send(f.next(), "", "408")
	if err := <-done; err != nil {
		t.Fatalf("pull ended by a 408: %v", err)
	}

	// Stopped with a message waiting: it is NAKed, the inbox dropped.
	f.send(req, "late-2", "")
	waittest.For(t, "the second late answer in the inbox", func() bool { return ib.waiting() == 1 })
	if err := tr.StopConsumer(t.Context(), &transport.StopParams{Queue: "q", Consumer: "c1"}); err != nil {
		t.Fatal(err)
	}
	if tr.kept(key) != nil {
		t.Fatal("StopConsumer left the consumer's inbox")
	}
	for {
		m, err := acks.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("late-2 not NAKed at the stop: %v", err)
		}
		if m.Subject == "fake.ack.late-2" && string(m.Data) == string(ackNak) {
			break
		}
	}
}

// kept returns the inbox t keeps for k, nil when none.
func (t *Transport) kept(k pullKey) *inbox {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pulls[k]
}

// waiting is how many messages wait in ib.
func (ib *inbox) waiting() int {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	return len(ib.buf)
}
