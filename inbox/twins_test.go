package inbox_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/inbox"
	"github.com/lily-mq/lily/internal/effecttest"
	"github.com/lily-mq/lily/internal/rabbittest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestContentIDTwins: on every application database, the inbox keys a
// content ID (lily.Delivery.ContentID) like any event ID, but tells a twin
// from a redelivery. The first delivery of another producer's copy with an
// applied content ID is a twin: not applied, reported as lily.EventTwin
// and logged as a warning naming the ID. A redelivery of it, and a copy
// Lily made of it (x-lily-event-id), are ordinary duplicates. With
// ContentIDsRefuse, a content ID gets a permanent error wrapping
// ErrContentID and no mark, while an ID from a publisher is applied.
func TestContentIDTwins(t *testing.T) {
	eachDB(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		rec := &effecttest.Recorder{}
		var logs transporttest.SyncBuffer
		ib := inbox.Inbox{Hooks: []lily.Hook{rec}, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
		content := func(count int, headers lily.Headers) *lily.Delivery {
			d := delivery("orders", "syn-0123456789abcdef0123456789abcdef")
			d.ContentID, d.DeliveryCount, d.Headers = true, count, headers
			return d
		}
		if !deliver(t, b, ib, content(1, nil)) {
			t.Fatal("the first message with a content ID was not applied")
		}
		if deliver(t, b, ib, content(1, nil)) {
			t.Fatal("a twin (the producer's copy, first delivery) was applied under its sibling's content ID")
		}
		if rec.Kinds(lily.EventTwin) != 1 || rec.Kinds(lily.EventDuplicate) != 0 {
			t.Fatalf("twin reported as %d twins and %d duplicates, want 1 and 0", rec.Kinds(lily.EventTwin), rec.Kinds(lily.EventDuplicate))
		}
		if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "syn-0123456789abcdef0123456789abcdef") {
			t.Fatalf("no warning naming the twin's ID: %q", l)
		}
		if deliver(t, b, ib, content(2, nil)) || deliver(t, b, ib, content(1, lily.Headers{evidence.HeaderEventID: "syn-0123456789abcdef0123456789abcdef"})) {
			t.Fatal("a redelivery or a Lily copy of an applied content ID was applied")
		}
		if rec.Kinds(lily.EventTwin) != 1 || rec.Kinds(lily.EventDuplicate) != 2 {
			t.Fatalf("redelivery and copy reported as %d twins and %d duplicates, want 1 and 2", rec.Kinds(lily.EventTwin), rec.Kinds(lily.EventDuplicate))
		}
		if got := b.count(t, `SELECT COUNT(*) FROM effects`); got != 1 {
			t.Fatalf("effects = %d, want 1", got)
		}

		refuse := inbox.Inbox{ContentIDs: inbox.ContentIDsRefuse, Logger: discard()}
		fresh := delivery("orders", "syn-fedcba9876543210fedcba9876543210")
		fresh.ContentID = true
		tx, commit, rollback := b.begin(t, ctx)
		defer rollback()
		ran := false
		_, err := refuse.Apply(ctx, tx, fresh, func() error { ran = true; return nil })
		var perm *lily.PermanentError
		if !errors.Is(err, inbox.ErrContentID) || !errors.As(err, &perm) || ran {
			t.Fatalf("ContentIDsRefuse: effect ran %v, error %v; want a permanent error wrapping ErrContentID and no effect", ran, err)
		}
		if !deliverIn(t, b, refuse, tx, delivery("orders", "0193a0c4-7f4e-7cc1-9a64-1d2b3c4d5e6f")) {
			t.Fatal("ContentIDsRefuse did not apply a message with a publisher's ID")
		}
		if err := commit(); err != nil {
			t.Fatal(err)
		}
		if ok, err := inbox.Applied(ctx, b.db, "orders", fresh.EventID); err != nil || ok {
			t.Fatalf("a refused content ID left a mark (%v, %v)", ok, err)
		}
	})
}

// TestForeignTwins: two different messages from a foreign producer that
// are byte-identical (same body, same headers, no ID), and a third one.
// On SQLite (raw INSERTs: each row has its own row ID) and Kafka (raw
// franz-go records: each has its own offset; that case is in
// transport/kafka/inboxoutbox) the twins get different event IDs and
// both effects apply: 3 effects, no twin reported, the ledger balanced
// with 3 accepted and acked. On RabbitMQ (raw amqp091, no
// message_id) nothing the broker hands out tells the twins apart, so they
// share one synthetic content ID: the inbox applies 2 effects — and says
// so, never silently: one lily.EventTwin, one warning naming the ID — and
// the ledger counts the twins as one message (2 accepted, 2 acked, none
// lost). With ContentIDsRefuse, RabbitMQ's twins and the third message are
// dead-lettered with ErrContentID's evidence instead (the twins' dead
// letters one catalog entry), and a message published with an ID is
// applied.
func TestForeignTwins(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		tr, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "queue.db"), sqlite.Options{PollInterval: 2 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		qc := lily.QueueConfig{Name: "twins.sqlite"}.WithDefaults()
		if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
			t.Fatal(err)
		}
		hdr, err := transport.MarshalHeaders(transport.Headers{"x-meta": map[string]any{"source": "billing"}, "x-bytes": []byte{0, 0xff}})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().UnixMilli()
		for _, body := range []string{effecttest.TwinBody, effecttest.TwinBody, effecttest.OtherBody} {
			if _, err := tr.DB().ExecContext(ctx, `INSERT INTO lily_messages(queue, event_id, body, headers, visible_at, enqueued_at)
				VALUES (?, '', ?, ?, ?, ?)`, qc.Name, []byte(body), hdr, now, now); err != nil {
				t.Fatal(err)
			}
		}
		cat, err := catalog.New(ctx, tr.DB())
		if err != nil {
			t.Fatal(err)
		}
		effecttest.CheckTwins(t, effecttest.ConsumeTwins(t, tr, tr, qc, inbox.ContentIDsOnce, 3), cat, tr, qc, false)
	})
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		url := rabbittest.URL(t)
		qc := lily.QueueConfig{Name: effecttest.RandomQueue("twins.rabbitmq"), Transport: lily.TransportRabbitMQ}.WithDefaults()
		tr := openRabbit(t, url, qc)
		rabbittest.Publish(context.Background(), t, url, qc.Name, foreignPublishing(effecttest.TwinBody, 1000), foreignPublishing(effecttest.TwinBody, 1000), foreignPublishing(effecttest.OtherBody, 2500))
		cat := transporttest.TempCatalog(t)
		effecttest.CheckTwins(t, effecttest.ConsumeTwins(t, ledger.Account(tr, ledger.New(cat)), tr, qc, inbox.ContentIDsOnce, 3), cat, tr, qc, true)
	})
	t.Run("rabbitmq/refuse", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		url := rabbittest.URL(t)
		qc := lily.QueueConfig{Name: effecttest.RandomQueue("twins.refuse"), Transport: lily.TransportRabbitMQ}.WithDefaults()
		tr := openRabbit(t, url, qc)
		rabbittest.Publish(context.Background(), t, url, qc.Name, foreignPublishing(effecttest.TwinBody, 1000), foreignPublishing(effecttest.TwinBody, 1000), foreignPublishing(effecttest.OtherBody, 2500))
		cat := transporttest.TempCatalog(t)
		acc := ledger.Account(tr, ledger.New(cat))
		withID := []lily.Message{{Body: []byte(`{"charge":"eur 5.00","account":"acct-9"}`)}}
		if err := lily.Publish(ctx, acc, qc.Name, withID); err != nil {
			t.Fatal(err)
		}
		run := effecttest.ConsumeTwins(t, acc, tr, qc, inbox.ContentIDsRefuse, 4)
		if total, per := run.Effects(t); total != 1 || per[string(withID[0].Body)] != 1 {
			t.Fatalf("effects %v, want only the message with an ID", per)
		}
		if _, err := cat.Ingest(ctx, acc, qc.Name); err != nil {
			t.Fatal(err)
		}
		var entries []*catalog.Entry
		if err := cat.Each(ctx, catalog.Filter{Queue: qc.Name}, func(e *catalog.Entry) error {
			entries = append(entries, e)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// The twins' dead letters are one entry: the same event ID, body and
		// source — one dead-lettering to the catalog (docs/identity.md).
		if len(entries) != 2 {
			t.Errorf("%d catalog entries, want 2: the twins' and the third message's", len(entries))
		}
		for _, e := range entries {
			if e.Reason != string(evidence.ReasonPermanent) || !strings.Contains(e.ErrorMessage, inbox.ErrContentID.Error()) {
				t.Errorf("dead letter %s: reason %s, error %q; want permanent with ErrContentID", e.EventID, e.Reason, e.ErrorMessage)
			}
		}
		rows, err := ledger.New(cat).Rows(ctx, tr)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(rows, func(r ledger.Row) bool { return r.Queue == qc.Name })
		if i < 0 || rows[i].Lost != 0 || rows[i].InFlight != 0 || rows[i].Acked != 1 || rows[i].Accepted != rows[i].Acked+rows[i].DeadLettered {
			t.Fatalf("ledger %+v: want the message with an ID acked, the refused ones dead-lettered, none lost", rows)
		}
		t.Logf("refuse: %d catalog entries for the 3 messages without an ID; ledger %+v", len(entries), rows[i])
	})
}
