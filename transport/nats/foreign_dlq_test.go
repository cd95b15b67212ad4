package nats_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/transporttest"
)

// foreignWorld is a stream with consumers written without Lily: billing
// (MaxDeliver 2) and audit read subjects of their own.
type foreignWorld struct {
	tr             *nats.Transport
	js             jetstream.JetStream
	stream, prefix string
	billing, audit jetstream.Consumer
	billingSubject string
	auditSubject   string
}

func newForeignWorld(t *testing.T) *foreignWorld {
	t.Helper()
	ctx := context.Background()
	tr := open(t)
	w := &foreignWorld{tr: tr, js: tr.JetStream()}
	id := fmt.Sprintf("%08x", rand.Uint32())
	w.stream, w.prefix = "FOREIGN_"+id, "foreign"+id
	w.billingSubject, w.auditSubject = w.prefix+".billing", w.prefix+".audit"
	if _, err := w.js.CreateStream(ctx, jetstream.StreamConfig{Name: w.stream, Subjects: []string{w.prefix + ".>"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.js.DeleteStream(context.Background(), w.stream)
		w.js.DeleteStream(context.Background(), nats.AdvisoryStream(w.stream, "billing"))
	})
	var err error
	if w.billing, err = w.js.CreateConsumer(ctx, w.stream, jetstream.ConsumerConfig{Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy,
		MaxDeliver: 2, FilterSubject: w.billingSubject}); err != nil {
		t.Fatal(err)
	}
	if w.audit, err = w.js.CreateConsumer(ctx, w.stream, jetstream.ConsumerConfig{Durable: "audit", AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubject: w.auditSubject}); err != nil {
		t.Fatal(err)
	}
	return w
}

// next pulls billing's next message (nil when none comes within a second).
func (w *foreignWorld) next(t *testing.T) jetstream.Msg {
	t.Helper()
	m, err := w.billing.Next(jetstream.FetchMaxWait(time.Second))
	if err != nil && err != natsgo.ErrTimeout {
		t.Fatal(err)
	}
	return m
}

// TestForeignJetStreamConsumer: a consumer written without Lily gives up
// on three messages — one NAKed until MaxDeliver, one terminated, one
// terminated and then removed from the stream (as its limits would) — and
// the server's advisories, kept by the advisory stream declared before,
// bring all three into the catalog with the advisory's evidence: bodies
// and headers of the two the stream still holds, and the third catalogued
// as removed (no body), never skipped. The advisories are deleted once
// committed, not before: a catalog that fails keeps them all. A redrive goes to billing alone (audit, another consumer of
// the stream, gets nothing); the removed one is refused; and once a third
// consumer reads billing's subject too, the redrive is refused, naming it.
func TestForeignJetStreamConsumer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newForeignWorld(t)
	fc := w.tr.Foreign(w.stream, "billing", "")
	if err := fc.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	seqs := map[string]uint64{}
	for _, body := range []string{"max-deliveries", "terminated", "removed"} {
		m := natsgo.NewMsg(w.billingSubject)
		m.Data = []byte(body)
		m.Header.Set("tenant", "acme")
		ack, err := w.js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		seqs[body] = ack.Sequence
	}
	// The consumer's own loop: NAK the first (twice: MaxDeliver 2),
	// terminate the others.
	for handled := 0; handled < 4; {
		m := w.next(t)
		if m == nil {
			t.Fatalf("billing got nothing after %d hand-outs", handled)
		}
		handled++
		if string(m.Data()) == "max-deliveries" {
			m.Nak()
		} else {
			m.Term()
		}
	}
	// The next pull finds the first past MaxDeliver: the server says so.
	if m := w.next(t); m != nil {
		t.Fatalf("billing got %q after MaxDeliver", m.Data())
	}
	src, err := w.js.Stream(ctx, w.stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.DeleteMsg(ctx, seqs["removed"]); err != nil {
		t.Fatal(err)
	}
	transporttest.WaitForState(t, "three advisories in the advisory stream", func() (bool, string) {
		n, err := fc.DeadLetterDepth(ctx, "")
		return err == nil && n == 3, fmt.Sprintf("%d (%v)", n, err)
	})

	// A catalog that fails to commit: every advisory stays.
	if _, err := fc.DrainDeadLetters(ctx, &transport.DrainParams{Queue: "foreign.billing"}, func(context.Context, []*transport.Delivery) error {
		return errors.New("catalog down")
	}); err == nil {
		t.Error("drain with a failing store returned no error")
	}
	if d, err := fc.DeadLetterDepth(ctx, ""); err != nil || d != 3 {
		t.Errorf("advisories after a failed commit: %d (%v), want all 3 kept", d, err)
	}

	cat := openCatalog(t)
	const queue = "foreign.billing"
	n, err := cat.IngestWith(ctx, fc, catalog.IngestParams{Queue: queue, Foreign: "jetstream"})
	if err != nil || n != 3 {
		t.Fatalf("ingested %d (%v), want 3", n, err)
	}
	if d, err := fc.DeadLetterDepth(ctx, ""); err != nil || d != 0 {
		t.Errorf("advisories left after the ingest: %d (%v)", d, err)
	}
	es, err := cat.List(ctx, catalog.Filter{Queue: queue}, 10)
	if err != nil || len(es) != 3 {
		t.Fatalf("catalog holds %d entries (%v), want 3", len(es), err)
	}
	byBody := map[string]*catalog.Entry{}
	for _, e := range es {
		seq := e.Headers[evidence.HeaderJetStreamSequence]
		switch seq {
		case fmt.Sprint(seqs["max-deliveries"]):
			byBody["max-deliveries"] = e
		case fmt.Sprint(seqs["terminated"]):
			byBody["terminated"] = e
		case fmt.Sprint(seqs["removed"]):
			byBody["removed"] = e
		default:
			t.Errorf("entry %s with stream sequence %v: not a message the consumer gave up on", e.EventID, seq)
		}
	}
	for body, want := range map[string]struct {
		reason     evidence.Reason
		advisory   string
		deliveries string
	}{
		"max-deliveries": {evidence.ReasonDeliveryLimit, evidence.JetStreamMaxDeliveries, "2"},
		"terminated":     {evidence.ReasonRejected, evidence.JetStreamTerminated, "1"},
		"removed":        {evidence.ReasonRejected, evidence.JetStreamTerminated, "1"},
	} {
		e := byBody[body]
		if e == nil {
			t.Errorf("no entry for %q", body)
			continue
		}
		if e.Reason != string(want.reason) || e.Headers[evidence.HeaderJetStreamAdvisory] != want.advisory ||
			e.Headers[evidence.HeaderJetStreamDeliveries] != want.deliveries || e.Headers[evidence.HeaderJetStreamConsumer] != "billing" ||
			e.Headers[evidence.HeaderJetStreamStream] != w.stream || e.Source != "nats/"+queue {
			t.Errorf("%s: reason %s, source %s, evidence %v; want %s from %s, %s after %s deliveries", body, e.Reason, e.Source, e.Headers, want.reason, w.stream, want.advisory, want.deliveries)
		}
		if body == "removed" {
			if len(e.Body) != 0 || e.Headers[evidence.HeaderJetStreamRemoved] != "true" || !strings.Contains(e.ErrorMessage, "removed") {
				t.Errorf("removed: body %q, headers %v, error %q; want no body, marked removed", e.Body, e.Headers, e.ErrorMessage)
			}
			continue
		}
		if string(e.Body) != body || e.Headers["tenant"] != "acme" || e.EventID != fmt.Sprintf("%s:%d", w.stream, seqs[body]) {
			t.Errorf("%s: event %s, body %q, tenant %v; want the message as stored", body, e.EventID, e.Body, e.Headers["tenant"])
		}
	}

	// Redrive: to billing alone.
	msgs, err := cat.RedriveMessages(ctx, []*catalog.Entry{byBody["max-deliveries"]})
	if err != nil {
		t.Fatal(err)
	}
	if err := fc.Publish(ctx, &transport.PublishParams{Queue: queue, Messages: msgs, Redrive: true, Direct: true}); err != nil {
		t.Fatalf("redrive to billing: %v", err)
	}
	m := w.next(t)
	if m == nil || string(m.Data()) != "max-deliveries" || m.Headers().Get("tenant") != "acme" {
		t.Fatalf("billing got %v after the redrive, want the message back", m)
	}
	if md, _ := m.Metadata(); md.NumDelivered != 1 {
		t.Errorf("redriven copy delivered %d times, want a fresh count of 1", md.NumDelivered)
	}
	for k := range m.Headers() {
		if strings.HasPrefix(k, evidence.HeaderJetStreamPrefix) {
			t.Errorf("redriven copy carries the ingest's evidence header %s", k)
		}
	}
	m.Ack()
	if info, err := w.audit.Info(ctx); err != nil || info.NumPending != 0 {
		t.Errorf("audit has %d pending (%v): the redrive reached another consumer", info.NumPending, err)
	}
	removed, err := cat.RedriveMessages(ctx, []*catalog.Entry{byBody["removed"]})
	if err != nil {
		t.Fatal(err)
	}
	if err := fc.Publish(ctx, &transport.PublishParams{Queue: queue, Messages: removed, Redrive: true, Direct: true}); err == nil || !strings.Contains(err.Error(), "removed") {
		t.Errorf("redrive of the removed message: %v, want a refusal saying it was removed", err)
	}
	// A consumer reading every subject: the redrive would reach it too.
	if _, err := w.js.CreateConsumer(ctx, w.stream, jetstream.ConsumerConfig{Durable: "tap", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	if err := fc.Publish(ctx, &transport.PublishParams{Queue: queue, Messages: msgs, Redrive: true, Direct: true}); err == nil || !strings.Contains(err.Error(), "tap") {
		t.Errorf("redrive with an overlapping consumer: %v, want a refusal naming tap", err)
	}
}
