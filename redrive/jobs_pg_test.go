package redrive_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// brokerPub is a broker-like publisher: it records what it sent and, at its
// die-th publish, "dies" (runtime.Goexit) after the messages went out and
// before the entries were marked.
type brokerPub struct {
	mu   sync.Mutex
	n    int
	die  int
	sent map[string]int
}

func (b *brokerPub) Publish(_ context.Context, p *transport.PublishParams) error {
	b.mu.Lock()
	b.n++
	for _, m := range p.Messages {
		b.sent[m.EventID]++
	}
	n := b.n
	b.mu.Unlock()
	if n == b.die {
		runtime.Goexit()
	}
	return nil
}

// A redrive job on a PostgreSQL catalog survives its runner: a second
// runner (another process, sharing only the catalog) claims it after the
// lease ran out and finishes it; only the batch in flight goes twice; a
// second job on the queue is refused meanwhile.
func TestJobSurvivesItsRunnerPostgres(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	open := func() *catalog.Store {
		s, err := catalog.OpenPostgres(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open() // two runners' processes
	var es []*catalog.Entry
	for i := range 10 {
		h := transport.Headers{}
		evidence.Record{Reason: evidence.ReasonRetriesExhausted, ErrorType: "E", ErrorMessage: "timeout", DeadLetteredAt: time.Now()}.Apply(h)
		es = append(es, catalog.NewEntry("orders", transport.Message{EventID: fmt.Sprintf("evt-%02d", i), Body: []byte{byte(i)}}, h,
			string(evidence.ReasonRetriesExhausted), time.Now()))
	}
	if err := a.Insert(ctx, es...); err != nil {
		t.Fatal(err)
	}
	pub := &brokerPub{die: 3, sent: map[string]int{}}
	target := func(context.Context, string) (redrive.Publisher, error) { return pub, nil }
	j, err := redrive.New(a).CreateJob(ctx, redrive.JobSpec{Filter: catalog.Filter{Queue: "orders"}, Rate: 1000, Actor: "t", Holder: "runner-a", Lease: time.Minute})
	if err != nil || j.Total != 10 {
		t.Fatalf("CreateJob = %+v, %v", j, err)
	}
	if _, err := redrive.New(b).CreateJob(ctx, redrive.JobSpec{Filter: catalog.Filter{Queue: "orders"}, Actor: "bob"}); !errors.Is(err, redrive.ErrJobActive) {
		t.Fatalf("second job on the queue from another process = %v, want ErrJobActive", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		redrive.New(a).RunJob(ctx, j, redrive.JobRunParams{Holder: "runner-a", Lease: time.Minute, Target: target, Batch: 2})
	}()
	<-done
	if c, err := redrive.New(b).ClaimJob(ctx, "runner-b", time.Minute, time.Now()); err != nil || c != nil {
		t.Fatalf("ClaimJob while runner-a's lease runs = %+v, %v; want none", c, err)
	}
	later := func() time.Time { return time.Now().Add(time.Hour) }
	c, err := redrive.New(b).ClaimJob(ctx, "runner-b", time.Minute, later())
	if err != nil || c == nil || c.ID != j.ID || c.Sent != 4 {
		t.Fatalf("ClaimJob after the lease ran out = %+v, %v; want job %d with 4 sent", c, err, j.ID)
	}
	pub.die = -1
	out, err := redrive.New(b).RunJob(ctx, c, redrive.JobRunParams{Holder: "runner-b", Lease: time.Minute, Target: target, Batch: 2, Now: later})
	if err != nil || out.State != redrive.JobDone || out.Sent != 10 {
		t.Fatalf("resumed job = %+v, %v", out, err)
	}
	twice := 0
	for i := range 10 {
		switch n := pub.sent[fmt.Sprintf("evt-%02d", i)]; {
		case n == 0 || n > 2:
			t.Errorf("evt-%02d sent %d times", i, n)
		case n == 2:
			twice++
		}
	}
	if twice != 2 {
		t.Errorf("%d sent twice, want 2 (the batch in flight when runner-a died)", twice)
	}
	if n, _ := a.CountBy(ctx, "state", catalog.Filter{}); n["redriven"] != 10 {
		t.Errorf("states %v, want 10 redriven", n)
	}
	js, err := redrive.New(a).Jobs(ctx, redrive.JobQuery{})
	if err != nil || len(js) != 1 || js[0].State != redrive.JobDone {
		t.Errorf("jobs %+v, %v: want the one job, done once", js, err)
	}
}
