package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/nats/natstest"
)

// TestForeignDLQJetStream: a JetStream consumer written without Lily
// ([[foreign_dlq]] kind = "jetstream"): the first 'lily dlq ingest'
// declares its advisory stream; the consumer then gives up on one message
// at MaxDeliver and terminates another; the next ingest takes both into
// the catalog, 'lily dlq redrive --include-crashers' sends them back to that consumer, and
// 'lily reconcile' balances: accepted 2 = 2 handed back.
func TestForeignDLQJetStream(t *testing.T) {
	t.Parallel()
	url := natstest.URL(t)
	ctx := context.Background()
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("%08x", rand.Uint32())
	stream, subject := "CLI_"+id, "cli"+id+".billing"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		js.DeleteStream(context.Background(), stream)
		js.DeleteStream(context.Background(), nats.AdvisoryStream(stream, "billing"))
	})
	billing, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 1})
	if err != nil {
		t.Fatal(err)
	}
	queue := "cli" + id + ".billing.dead"
	cfg := writeConfig(t, fmt.Sprintf("db = %q\nnats_url = %q\n[[foreign_dlq]]\nqueue = %q\nkind = \"jetstream\"\nstream = %q\nconsumer = \"billing\"\n",
		filepath.Join(t.TempDir(), "catalog.db"), url, queue, stream))
	ingest := func(want int) {
		t.Helper()
		code, out, errOut := run(t, "dlq", "ingest", "--config", cfg, "--json")
		var ing ingestJSON
		if code != 0 || json.Unmarshal([]byte(out), &ing) != nil || ing.Total != want {
			t.Fatalf("ingest exit %d, want %d ingested\n%s\n%s", code, want, out, errOut)
		}
	}
	ingest(0) // declares the advisory stream
	for _, body := range []string{"declined", "cancelled"} {
		if _, err := js.Publish(ctx, subject, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		m, err := billing.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data()) == "declined" {
			m.Nak() // MaxDeliver 1: the next pull reports it
		} else {
			m.Term()
		}
	}
	if _, err := billing.Next(jetstream.FetchMaxWait(200 * time.Millisecond)); err == nil {
		t.Fatal("billing got a message past MaxDeliver")
	}
	ingest(2)
	// MaxDeliver is delivery_limit: held back from a bulk redrive unless
	// asked for.
	if code, out, errOut := run(t, "dlq", "redrive", "--config", cfg, "--include-crashers", "--json"); code != 0 {
		t.Fatalf("redrive exit %d\n%s\n%s", code, out, errOut)
	}
	var got []string
	for range 2 {
		m, err := billing.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("billing after the redrive: %v (got %v)", err, got)
		}
		got = append(got, string(m.Data()))
		m.Ack()
	}
	sort.Strings(got)
	if fmt.Sprint(got) != "[cancelled declined]" {
		t.Errorf("billing got %v after the redrive, want both messages back", got)
	}
	code, out, errOut := run(t, "reconcile", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("reconcile exit %d\n%s\n%s", code, out, errOut)
	}
	var rec reconcileJSON
	if err := json.Unmarshal([]byte(out), &rec); err != nil || !rec.Balanced {
		t.Fatalf("reconcile: %v %s", err, out)
	}
	for _, r := range rec.Queues {
		if r.Queue == queue && (r.Accepted != 2 || r.Acked != 2 || r.Lost != 0) {
			t.Errorf("ledger of %s: %+v, want accepted 2 = 2 redriven", queue, r)
		}
	}
}
