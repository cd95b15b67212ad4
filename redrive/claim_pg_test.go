package redrive_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogtest"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// pgFleet opens n stores on one PostgreSQL schema: n processes of a fleet.
func pgFleet(t *testing.T, n int) []*catalog.Store { return catalogtest.PGFleet(t, n) }

// insertPending inserts n pending entries evt-000.. on queue orders.
func insertPending(t *testing.T, s *catalog.Store, n int) {
	t.Helper()
	var es []*catalog.Entry
	for i := range n {
		h := transport.Headers{}
		evidence.Record{Reason: evidence.ReasonRetriesExhausted, ErrorType: "E", ErrorMessage: "timeout", DeadLetteredAt: time.Now()}.Apply(h)
		es = append(es, catalog.NewEntry("orders", transport.Message{EventID: fmt.Sprintf("evt-%03d", i), Body: []byte{byte(i)}}, h,
			string(evidence.ReasonRetriesExhausted), time.Now()))
	}
	if err := s.Insert(context.Background(), es...); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresRedriveTakesNoFleetLock: while another process holds one
// pending entry's row, a redrive of the queue sends and marks the others
// and leaves that one pending. Before issue 29 a redrive's marking took
// the catalog's lock exclusively and waited for every other catalog
// transaction.
func TestPostgresRedriveTakesNoFleetLock(t *testing.T) {
	ss := pgFleet(t, 2)
	ctx := context.Background()
	insertPending(t, ss[0], 3)
	catalogtest.HoldEntry(t, ss[0], "evt-001")
	pub := &brokerPub{sent: map[string]int{}}
	var res redrive.Result
	err := pgtest.Finishes(t, "a redrive", func() (err error) {
		res, err = redrive.New(ss[1]).Redrive(ctx, redrive.Params{Filter: catalog.Filter{Queue: "orders"}, Actor: "t",
			Target: func(context.Context, string) (redrive.Publisher, error) { return pub, nil }})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Redriven != 2 || len(pub.sent) != 2 || pub.sent["evt-001"] != 0 {
		t.Errorf("redriven %d, sent %v: want evt-000 and evt-002, the held evt-001 left alone", res.Redriven, pub.sent)
	}
	if n, _ := ss[1].CountBy(ctx, "state", catalog.Filter{}); n["redriven"] != 2 || n["pending"] != 1 {
		t.Errorf("states %v, want 2 redriven and 1 pending", n)
	}
}

// TestPostgresRedriveReplicasSendEachOnce: four replicas redrive the same
// 200 pending entries at once, in small batches: each entry is sent once
// and marked redriven once, and the audit names it once. Before, each
// replica read the same pending page and published it before marking.
func TestPostgresRedriveReplicasSendEachOnce(t *testing.T) {
	const n = 200
	ss := pgFleet(t, 4)
	ctx := context.Background()
	insertPending(t, ss[0], n)
	pub := &brokerPub{sent: map[string]int{}}
	var wg sync.WaitGroup
	redriven := make([]int, len(ss))
	for i, s := range ss {
		wg.Go(func() {
			res, err := redrive.New(s).Redrive(ctx, redrive.Params{Filter: catalog.Filter{Queue: "orders"}, Actor: fmt.Sprintf("replica-%d", i), Batch: 5,
				Target: func(context.Context, string) (redrive.Publisher, error) { return pub, nil }})
			if err != nil {
				t.Errorf("replica %d: %v", i, err)
			}
			redriven[i] = res.Redriven
		})
	}
	wg.Wait()
	total := 0
	for _, r := range redriven {
		total += r
	}
	if total != n {
		t.Errorf("replicas redrove %v (%d), want %d in all", redriven, total, n)
	}
	for i := range n {
		if c := pub.sent[fmt.Sprintf("evt-%03d", i)]; c != 1 {
			t.Errorf("evt-%03d sent %d times, want once", i, c)
		}
	}
	named := map[string]int{}
	err := ss[0].EachAudit(ctx, catalog.AuditFilter{}, func(r *catalog.AuditRecord) error {
		if r.Outcome == catalog.OutcomeRedriven {
			for _, id := range r.EventIDs {
				named[id]++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if c := named[fmt.Sprintf("evt-%03d", i)]; c != 1 {
			t.Errorf("evt-%03d named by %d redriven audit records, want 1", i, c)
		}
	}
}
