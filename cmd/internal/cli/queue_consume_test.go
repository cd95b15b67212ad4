package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/internal/waittest"
)

// TestConsumeObeysQueuePause: 'lily consume' started on a paused queue
// heartbeats "paused" and takes nothing; 'lily queue resume' lets it
// consume everything, and it leaves no heartbeat behind when it stops.
func TestConsumeObeysQueuePause(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lily.db")
	queue := "paused.orders"
	cfg := sidecarConfig(t, lily.TransportSQLite, "", "", db, queue)
	pub := openSidecarQueue(t, lily.TransportSQLite, "", db, demo.QueueConfig(queue, lily.TransportSQLite, ""))
	if code, out, errOut := run(t, "queue", "pause", "--config", cfg, "--queue", queue, "--reason", "test"); code != 0 {
		t.Fatalf("pause: exit %d\n%s\n%s", code, out, errOut)
	}
	msgs := make([]lily.Message, 5)
	for i := range msgs {
		msgs[i].Body = []byte(fmt.Sprint(i))
	}
	if err := lily.Publish(ctx, pub, queue, msgs); err != nil {
		t.Fatal(err)
	}
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := run(t, "consume", "--config", cfg, "--queue", queue, "--instance", "sidecar-p1",
			"--exec", "true", "--exit-when-idle", "300ms", "--json")
		done <- result{code, out, errOut}
	}()
	cat, err := catalog.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	heartbeat := func() *catalog.Consumer {
		cs, err := cat.Consumers(ctx, queue, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for i := range cs {
			if cs[i].Instance == "sidecar-p1" {
				return &cs[i]
			}
		}
		return nil
	}
	waittest.ForState(t, "the sidecar's heartbeat to say paused", func() (bool, string) {
		hb := heartbeat()
		return hb != nil && hb.Paused, fmt.Sprintf("%+v", hb)
	})
	if n, err := pub.InFlight(ctx, queue); err != nil || n != 5 {
		t.Fatalf("in the queue while paused: %d, %v; want all 5", n, err)
	}
	select {
	case r := <-done:
		t.Fatalf("consume stopped while paused: exit %d\n%s\n%s", r.code, r.out, r.err)
	default:
	}
	if code, out, errOut := run(t, "queue", "resume", "--config", cfg, "--queue", queue); code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out, errOut)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(waittest.DefaultLimit):
		t.Fatalf("consume did not drain the queue and stop after the resume; heartbeat %+v", heartbeat())
	}
	var sum consumeJSON
	if r.code != 0 || json.Unmarshal([]byte(r.out), &sum) != nil || sum.Acked != 5 {
		t.Fatalf("consume after resume: exit %d, %+v\n%s\n%s", r.code, sum, r.out, r.err)
	}
	if hb := heartbeat(); hb != nil {
		t.Errorf("heartbeat after the sidecar stopped: %+v, want none", hb)
	}
}
