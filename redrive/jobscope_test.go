package redrive

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/catalogtest"
)

// TestPostgresJobCreationExact: four processes create overlapping redrive
// jobs at once — one on every queue, three on queues a, b and c —, 40
// rounds. The jobs' creations are decided one after the other (the job
// scope's lock), so each round ends with the all-queues job alone or the
// three one-queue jobs, never both, and every refused creator gets the
// *JobConflictError the sequential case gives, naming an active job that
// holds its queue. Before, both kinds started in some rounds: nothing
// serialised the all-queues check (a partial unique index covers one
// queue only).
func TestPostgresJobCreationExact(t *testing.T) {
	jobCreationRace(t, catalogtest.PGFleet(t, 4))
}

// TestSQLiteJobCreationExact: the same on four handles of one SQLite file,
// where each creation's transaction is the one writer.
func TestSQLiteJobCreationExact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.db")
	ss := make([]*catalog.Store, 4)
	for i := range ss {
		s, err := catalog.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		ss[i] = s
	}
	jobCreationRace(t, ss)
}

// jobCreationRace runs the rounds of TestPostgresJobCreationExact on ss,
// processes sharing one catalog.
func jobCreationRace(t *testing.T, ss []*catalog.Store) {
	ctx := context.Background()
	queues := []string{"", "a", "b", "c"} // "": the job of every queue
	const rounds = 40
	for r := range rounds {
		start := make(chan struct{})
		jobs := make([]*Job, len(ss))
		errs := make([]error, len(ss))
		var wg sync.WaitGroup
		for i, s := range ss {
			wg.Go(func() {
				<-start
				jobs[i], errs[i] = New(s).CreateJob(ctx, JobSpec{Filter: catalog.Filter{Queue: queues[i]}, Actor: fmt.Sprintf("p%d", i)})
			})
		}
		close(start)
		wg.Wait()
		var started []string
		for i, err := range errs {
			var c *JobConflictError
			switch {
			case err == nil:
				started = append(started, jobs[i].Queue)
			case errors.As(err, &c):
				if !c.Job.State.Active() || (c.Job.Queue != AllQueues && queues[i] != "" && c.Job.Queue != queues[i]) {
					t.Errorf("round %d: creator of %q refused by job %d on %q (%s), which does not hold its queue", r, queues[i], c.Job.ID, c.Job.Queue, c.Job.State)
				}
			default:
				t.Fatalf("round %d: creator of %q: %v, want a job or a *JobConflictError", r, queues[i], err)
			}
		}
		if fmt.Sprint(started) != "[*]" && fmt.Sprint(started) != "[a b c]" {
			t.Fatalf("round %d: started jobs on %v; want the all-queues job alone or a, b and c", r, started)
		}
		active, err := New(ss[0]).Jobs(ctx, JobQuery{Active: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range active { // the next round starts with every queue free
			if _, err := New(ss[0]).CancelJob(ctx, j.ID, "t"); err != nil {
				t.Fatal(err)
			}
		}
	}
}
