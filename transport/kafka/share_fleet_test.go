package kafka_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestShareCrashTypePoisonCompetingMembers is the case share groups exist
// for, with a record that kills its process: three member processes of one
// share group consume one topic at once, each restarted when it dies. The
// broker's count must bound the poison — whichever member holds it dies,
// the next delivery goes to another member — so the members die exactly
// delivery_limit times in all and the poison, and only the poison, is
// dead-lettered with the broker's count; every other record is processed
// exactly once and nothing stays in flight.
//
// The neighbours survive because a death's redeliveries never wait beside
// the one that runs: a member that takes several in one poll keeps one and
// gives the others back through the give-back topic (copies carrying their
// counts), and hands a redelivery out alone even before its runtime turns
// cautious. Before that, a member fetching wide held the rest while one
// ran, and when the one was the poison they died with it (up to 8 of 90
// dead-lettered under a load of 8).
func TestShareCrashTypePoisonCompetingMembers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newShareCluster(t, kfake.BrokerConfigs(map[string]string{kafka.BrokerShareLockDuration: fmt.Sprint(crashShareLock.Milliseconds())}))
	tr := open(t, c, shareOptions)
	name := fmt.Sprintf("crash.fleet.%08x", rand.Uint32())
	group := "share." + name
	qc := lily.QueueConfig{Name: name, Transport: lily.TransportKafka, DeliveryLimit: new(3), KafkaShareGroup: group}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	msgs := make([]lily.Message, 90)
	for i := range msgs {
		msgs[i] = lily.Message{Key: fmt.Sprintf("k%d", i%9), Body: []byte(fmt.Sprintf("order-%d", i))}
	}
	const poison = 31
	msgs[poison].Body = []byte("poison")
	if err := lily.Publish(ctx, tr, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "acked.log")
	restarts := transporttest.RunCrashFleet(t, 3, crashChildBrokers+"="+strings.Join(c.ListenAddrs(), ","),
		crashChildQueue+"="+qc.Name, crashChildLog+"="+logPath, crashChildShare+"="+group, crashChildShareLock+"="+crashShareLock.String())
	if restarts != qc.Settings().DeliveryLimit {
		t.Errorf("the members died %d times in all, want delivery_limit = %d", restarts, qc.Settings().DeliveryLimit)
	}
	dls, err := tr.DeadLetters(ctx, qc.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].EventID != msgs[poison].EventID {
		for _, d := range dls {
			r, _ := evidence.Decode(d.Headers)
			t.Logf("DL %s %s reason %s count %d", d.EventID, d.Body, r.Reason, r.DeliveryCount)
		}
		t.Fatalf("dead-letter topic holds %d records, want exactly the poison", len(dls))
	}
	poisonDL := dls[0]
	rec, err := evidence.Decode(poisonDL.Headers)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Reason != evidence.ReasonDeliveryLimit || rec.DeliveryCount != qc.Settings().DeliveryLimit+1 {
		t.Errorf("reason %q, delivery count %d; want delivery_limit and the broker's count %d", rec.Reason, rec.DeliveryCount, qc.Settings().DeliveryLimit+1)
	}
	// Conservation: every message but the poison processed, the poison
	// never, none invented.
	transporttest.WantProcessedAllBut(t, logPath, msgs, poison)
	if n, err := tr.InFlight(ctx, qc.Name); err != nil || n != 0 {
		t.Errorf("in flight after the run: %d (%v), want 0", n, err)
	}
}
