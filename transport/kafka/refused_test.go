package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/kafka"
	"github.com/lily-mq/lily/transport/transporttest"
)

// TestOversizedDeadLetterStoredInCatalog (issue 30, item 2, on Kafka):
// the dead-letter topic's max.message.bytes (4000 here) refuses the copy of
// a 3,950-byte message with its evidence (MESSAGE_TOO_LARGE; with it any
// small copy produced in the same batch). Through
// ledger.Accounted that dead letter is stored in the catalog — body, the
// handler's error, x-lily-dlq-refused naming max.message.bytes — and the
// original's offset is committed; the small ones go to the dead-letter
// topic as usual; a healthy record behind the big one on its partition is
// acked (not stalled behind it). Every handler runs once, the ledger
// balances after the ingest. Before, the hand-off failed again on every
// redelivery.
func TestOversizedDeadLetterStoredInCatalog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCluster(t)
	tr := open(t, c)
	store := openCatalog(t)
	acc := ledger.Account(tr, ledger.New(store))
	qc := lily.QueueConfig{Name: fmt.Sprintf("dlt.refused.%08x", rand.Uint32()), Transport: lily.TransportKafka}.WithDefaults()
	if err := acc.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	dlt := kafka.DeadLetterTopic(qc.Name)
	res, err := kadm.NewClient(tr.Client()).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr("4000")}}, dlt)
	if err == nil {
		for _, r := range res {
			err = errors.Join(err, r.Err)
		}
	}
	if err != nil {
		t.Fatalf("set max.message.bytes on %s: %v", dlt, err)
	}
	big := make([]byte, 3950) // incompressible: the producer compresses batches
	for i := range big {
		big[i] = byte('a' + rand.IntN(26))
	}
	msgs := []lily.Message{{Key: "a", Body: big}, {Key: "b", Body: []byte("small-1")}, {Key: "c", Body: []byte("small-2")},
		{Key: "a", Body: []byte("healthy")}}
	if err := lily.Publish(ctx, acc, qc.Name, msgs); err != nil {
		t.Fatal(err)
	}
	healthy := msgs[3].EventID // set by Publish
	var mu sync.Mutex
	calls := map[string]int{}
	refused := map[string]string{}
	hook := lily.HookFunc(func(_ context.Context, e lily.Event) {
		if e.Kind == lily.EventDeadLettered && e.Refused != "" {
			mu.Lock()
			refused[e.EventID] = e.Refused
			mu.Unlock()
		}
	})
	stop := runConsumer(t, acc, qc, lily.HandlerFunc(func(ctx context.Context, d *lily.Delivery) error {
		mu.Lock()
		calls[d.EventID]++
		mu.Unlock()
		if string(d.Body) == "healthy" {
			return nil
		}
		return lily.Permanent(errors.New("cannot handle " + string(d.Body[:5])))
	}), hook)
	transporttest.WaitForState(t, "every poison message dead-lettered, in the catalog or the dead-letter topic, and the healthy one handled", func() (bool, string) {
		if _, err := store.Ingest(ctx, acc, qc.Name); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := calls[healthy]
		state := fmt.Sprintf("handler calls %v, refused %v", calls, refused)
		mu.Unlock()
		es := len(entries(t, store, qc.Name))
		return n == 1 && es == len(msgs)-1, fmt.Sprintf("%s, %d entries", state, es)
	})
	stop()
	mu.Lock()
	defer mu.Unlock()
	for _, m := range msgs {
		if calls[m.EventID] != 1 {
			t.Errorf("handler ran %d times for %.8s, want once", calls[m.EventID], m.Body)
		}
	}
	// The big one is refused; a small one batched with it (same
	// partition) is refused with it, and stored the same way.
	if !strings.Contains(refused[msgs[0].EventID], "max.message.bytes") {
		t.Errorf("refused events %v, want the big message's, naming max.message.bytes", refused)
	}
	noted := 0
	for _, e := range entries(t, store, qc.Name) {
		note, _ := e.Headers[evidence.HeaderDLQRefused].(string)
		if note != "" {
			noted++
		}
		if e.Reason != string(evidence.ReasonPermanent) || !strings.Contains(e.ErrorMessage, "cannot handle") ||
			(note != "") != (refused[e.EventID] != "") || (note != "" && !strings.Contains(note, "max.message.bytes")) ||
			(e.EventID == msgs[0].EventID && (len(e.Body) != len(big) || note == "")) {
			t.Errorf("entry %s: reason %q error %q body %d note %q", e.EventID, e.Reason, e.ErrorMessage, len(e.Body), note)
		}
	}
	if noted != len(refused) {
		t.Errorf("%d entries say the topic refused them, %d events: want the same", noted, len(refused))
	}
	rows, err := ledger.New(store).Rows(ctx, acc)
	if want := (ledger.Row{Queue: qc.Name, Accepted: 4, Acked: 1, DeadLettered: 3}); err != nil || len(rows) != 1 || rows[0] != want {
		t.Errorf("ledger %+v (%v), want %+v", rows, err, want)
	}
}
