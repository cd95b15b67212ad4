package nats_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/soaktest"
	"github.com/lily-mq/lily/transport/nats/natstest"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestKill9Loop kills the consumer process with SIGKILL at random moments
// while it works through a preloaded queue (1,000 messages; 5,000 in the
// soak run), restarting it each time, then lets a last one finish: every
// message is processed at least once or, for the 1 in 50 that fail for
// good, dead-lettered — none lost, no innocent one dead-lettered. What a
// killed process held comes back after AckWait with NumDelivered raised;
// delivery_limit is 20, above any message's share of the kills.
func TestKill9Loop(t *testing.T) {
	t.Parallel()
	url := natstest.URL(t)
	tr := open(t)
	ctx := context.Background()
	qc := declareCrash(t, tr, "kill9")
	n := soaktest.Pick(1000, 5000)
	msgs := make([]lily.Message, n)
	permanent := map[string]bool{}
	for i := range msgs {
		msgs[i] = lily.Message{Body: fmt.Appendf(nil, "order-%d", i)}
		if i%50 == 7 {
			msgs[i].Body = fmt.Appendf(nil, "order-%d/permanent", i)
		}
	}
	for i := 0; i < n; i += 500 {
		if err := lily.Publish(ctx, tr, qc.Name, msgs[i:min(i+500, n)]); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range msgs {
		if len(m.Body) > 10 && string(m.Body[len(m.Body)-10:]) == "/permanent" {
			permanent[m.EventID] = true
		}
	}
	logPath := filepath.Join(t.TempDir(), "acked.log")
	if err := os.WriteFile(logPath, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), childURL+"="+url, childQueue+"="+qc.Name, childLog+"="+logPath, childLimit+"=20", childPause+"=1ms")
	r := rand.New(rand.NewPCG(7, 7))
	kills := 0
	for round := 0; ; round++ {
		c := exec.Command(os.Args[0], "-test.run=^$")
		c.Env, c.Stderr = env, os.Stderr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		if round >= soaktest.Pick(5, 12) {
			if err := c.Wait(); err != nil {
				t.Fatalf("final consumer: %v", err)
			}
			break
		}
		before := len(transporttest.ReadIDs(t, logPath))
		transporttest.WaitWithin(t, time.Minute, fmt.Sprintf("round %d: the consumer to make progress", round), func() (bool, string) {
			got := len(transporttest.ReadIDs(t, logPath))
			return got >= before+50 || got+len(permanent) >= n, fmt.Sprintf("%d processed, %d before the round", got, before)
		})
		time.Sleep(time.Duration(r.IntN(100)) * time.Millisecond) // simulates a crash at a random moment of the flow
		c.Process.Signal(syscall.SIGKILL)
		c.Wait()
		if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			kills++
		}
	}
	processed := transporttest.ReadIDs(t, logPath)
	var lost []string
	for _, m := range msgs {
		if !permanent[m.EventID] && !processed[m.EventID] {
			lost = append(lost, m.EventID)
		}
	}
	dls, err := tr.PeekDeadLetters(ctx, qc.Name, 0)
	if err != nil {
		t.Fatal(err)
	}
	var innocent []string
	dead := map[string]bool{}
	for _, d := range dls {
		rec, _ := evidence.Decode(d.Headers)
		if !permanent[d.EventID] || rec.Reason != evidence.ReasonPermanent {
			innocent = append(innocent, fmt.Sprintf("%s (%s)", d.EventID, rec.Reason))
		}
		dead[d.EventID] = true
	}
	for id := range permanent {
		if !dead[id] {
			lost = append(lost, id+" (permanent, not dead-lettered)")
		}
	}
	t.Logf("%d messages, %d kills: %d processed, %d dead-letter copies for %d permanent failures", n, kills, len(processed), len(dls), len(permanent))
	if len(lost) > 0 || len(innocent) > 0 {
		// What the handlers logged that was never published says how a
		// message went missing (a delivery read without its event ID).
		published := map[string]bool{}
		for _, m := range msgs {
			published[m.EventID] = true
		}
		var strange []string
		for id := range processed {
			if !published[id] {
				strange = append(strange, id)
			}
		}
		t.Errorf("lost %d: %v; innocent dead-lettered %d: %v; logged but never published: %v", len(lost), lost, len(innocent), innocent, strange)
	}
	if inflight, err := tr.InFlight(ctx, qc.Name); err != nil || inflight != 0 {
		t.Errorf("%d in flight after the last consumer (%v), want 0", inflight, err)
	}
	if kills == 0 {
		t.Error("no consumer was killed: the test did not exercise anything")
	}
}
