package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// ackConsumer acks every message of orders.created in db until the test
// ends; the returned function returns the deliveries acked so far, in the
// order received.
func ackConsumer(t *testing.T, db string) func() []*transport.Delivery {
	t.Helper()
	return ackOn(t, db, dlqQueue)
}

// waitReceived polls received until it holds n deliveries and returns
// them (the caller checks there are no more); after a minute it fails the
// test.
func waitReceived(t *testing.T, received func() []*transport.Delivery, n int) []*transport.Delivery {
	t.Helper()
	var ds []*transport.Delivery
	waittest.Poller{Limit: time.Minute}.For(t, fmt.Sprintf("the consumer to receive %d messages", n), func() (bool, string) {
		ds = received()
		return len(ds) >= n, fmt.Sprintf("%d received", len(ds))
	})
	return ds
}

// waitJobState polls the catalog until the job satisfies ok.
func waitJobState(t *testing.T, db string, id int64, ok func(*redrive.Job) bool) *redrive.Job {
	t.Helper()
	cat := openCatalog(t, db)
	var j *redrive.Job
	waittest.Poller{Limit: time.Minute}.For(t, fmt.Sprintf("job %d to reach the state awaited", id), func() (bool, string) {
		var err error
		j, err = redrive.New(cat).Job(context.Background(), id)
		if err != nil && !errors.Is(err, redrive.ErrNoJob) { // not created yet: wait
			t.Fatal(err)
		}
		return err == nil && ok(j), fmt.Sprintf("%+v", j)
	})
	return j
}

func TestDLQRedriveSampleNobodyAcks(t *testing.T) {
	t.Parallel()
	db := seedDLQ(t)
	code, out, errOut := run(t, "dlq", "redrive", "--db", db, "--reason", "permanent", "--sample", "1", "--observe", "100ms", "--json")
	if code != 1 || !strings.Contains(errOut, "no consumer acked the sample within 100ms: is a consumer running?") {
		t.Fatalf("exit %d\n%s\n%s", code, errOut, out)
	}
	var res redriveJSON
	mustJSON(t, out, &res)
	if !res.Stopped || res.Sample == nil || res.Sample.Clean || res.Redriven != 1 || res.Job == 0 {
		t.Errorf("JSON %+v", res)
	}
	if st := entryStates(t, db); st["redriven"] != 1 || st["pending"] != 5 {
		t.Errorf("states %v, want the sample redriven and the rest pending", st)
	}
	var jobs jobsJSON
	if code, out, _ := run(t, "dlq", "jobs", "--db", db, "--json"); code != 0 {
		t.Fatalf("jobs: %d", code)
	} else {
		mustJSON(t, out, &jobs)
	}
	if len(jobs.Jobs) != 1 || jobs.Jobs[0].ID != res.Job || jobs.Jobs[0].State != redrive.JobStopped || jobs.Jobs[0].Sent != 1 {
		t.Errorf("jobs %+v", jobs.Jobs)
	}
}

func TestDLQJobsOnePerQueueAndCancel(t *testing.T) {
	t.Parallel()
	db := seedDLQ(t)
	type result struct {
		code     int
		out, err string
	}
	first := make(chan result, 1)
	go func() { // waits an hour for an ack nobody sends
		code, out, errOut := run(t, "dlq", "redrive", "--db", db, "--queue", dlqQueue, "--sample", "1", "--observe", "1h", "--json", "--actor", "alice")
		first <- result{code, out, errOut}
	}()
	// The first job exists once its sample is out.
	var id int64
	cat := openCatalog(t, db)
	waittest.Poller{Limit: time.Minute}.For(t, "a sampling job", func() (bool, string) {
		js, err := redrive.New(cat).Jobs(context.Background(), redrive.JobQuery{Active: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(js) == 1 && js[0].SampleDone {
			id = js[0].ID
		}
		return id != 0, fmt.Sprintf("active jobs %+v", js)
	})
	code, out, errOut := run(t, "dlq", "redrive", "--db", db, "--reason", "permanent")
	if code != 1 || !strings.Contains(errOut, fmt.Sprintf("redrive job %d (sampling, by alice", id)) || !strings.Contains(errOut, fmt.Sprintf("lily dlq cancel %d", id)) {
		t.Errorf("second redrive: %d %s %s", code, out, errOut)
	}
	if code, out, _ := run(t, "dlq", "jobs", "--db", db); code != 0 || !strings.Contains(out, "sampling") || !strings.Contains(out, "alice") {
		t.Errorf("jobs: %d %s", code, out)
	}
	if code, out, errOut := run(t, "dlq", "cancel", fmt.Sprint(id), "--db", db, "--actor", "carol"); code != 0 || !strings.Contains(out, "cancelled") {
		t.Errorf("cancel: %d %s %s", code, out, errOut)
	}
	r := <-first
	if r.code != 1 || !strings.Contains(r.err, "cancelled") {
		t.Errorf("the cancelled redrive: exit %d\n%s\n%s", r.code, r.err, r.out)
	}
	var res redriveJSON
	mustJSON(t, r.out, &res)
	if res.Job != id || res.Redriven != 1 {
		t.Errorf("cancelled redrive JSON %+v", res)
	}
	if code, _, errOut := run(t, "dlq", "cancel", fmt.Sprint(id), "--db", db); code != 1 || !strings.Contains(errOut, "nothing to cancel") {
		t.Errorf("cancel again: %d %s", code, errOut)
	}
	if st := entryStates(t, db); st["redriven"] != 1 || st["pending"] != 5 {
		t.Errorf("states %v", st)
	}
}

// A 'lily dlq redrive' killed with SIGKILL mid-job leaves its job behind;
// once its lease ran out 'lily dlq resume' finishes it after the cursor:
// every entry sent exactly once (the SQLite store publishes in the
// catalog's transaction), and the ledger balances.
func TestDLQRedriveSurvivesKill(t *testing.T) {
	t.Parallel()
	db := seedDLQ(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(exe, "dlq", "redrive", "--db", db, "--rate", "4", "--job-lease", "500ms", "--include-crashers")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	j := waitJobState(t, db, 1, func(j *redrive.Job) bool { return j.Sent >= 2 })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if j.Total != 6 || j.State != redrive.JobRunning {
		t.Fatalf("job before the kill: %+v\n%s%s", j, out.String(), errb.String())
	}
	received := ackConsumer(t, db)
	// Once the dead runner's lease ran out, the job is orphaned: a new
	// redrive of the queue says so and how to go on (it used to say
	// "wait for it", for ever), and 'dlq jobs' shows it.
	waittest.Poller{Limit: time.Minute, Every: 50 * time.Millisecond}.For(t, "a new redrive to see the job orphaned", func() (bool, string) {
		_, _, rerr := run(t, "dlq", "redrive", "--db", db, "--include-crashers")
		return strings.Contains(rerr, "no runner holds it") && strings.Contains(rerr, "lily dlq resume 1"), rerr
	})
	if code, out, _ := run(t, "dlq", "jobs", "--db", db); code != 0 || !strings.Contains(out, "running (orphaned)") || !strings.Contains(out, "'lily dlq resume 1'") {
		t.Errorf("jobs with an orphaned job: %d\n%s", code, out)
	}
	var code int
	var rout, rerr string
	waittest.Poller{Limit: time.Minute, Every: 50 * time.Millisecond}.For(t, "the killed runner's lease to run out", func() (bool, string) {
		code, rout, rerr = run(t, "dlq", "resume", "1", "--db", db, "--json")
		return !strings.Contains(rerr, "is held by runner"), rerr
	})
	if code != 0 {
		t.Fatalf("resume: %d %s %s", code, rout, rerr)
	}
	var done redrive.Job
	mustJSON(t, rout, &done)
	if done.State != redrive.JobDone || done.Sent != 6 || done.Done() != done.Total {
		t.Errorf("resumed job %+v", done)
	}
	redrivenOnceEach(t, db, received)
}

// 'lily serve' runs the jobs nobody holds: one left by a dead runner is
// finished after its cursor.
func TestServeRunsOrphanedJobs(t *testing.T) {
	t.Parallel()
	db := seedDLQ(t)
	cat := openCatalog(t, db)
	j, err := redrive.New(cat).CreateJob(context.Background(), redrive.JobSpec{Filter: catalog.Filter{Queue: dlqQueue}, Actor: "alice",
		Holder: "a-runner-that-died", Lease: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	received := ackConsumer(t, db)
	startServe(t, "--db", db, "--listen", "127.0.0.1:0")
	done := waitJobState(t, db, j.ID, func(j *redrive.Job) bool { return !j.State.Active() })
	if done.State != redrive.JobDone || done.Sent != 5 || done.HeldBack != 1 {
		t.Errorf("job %+v", done)
	}
	if n := len(waitReceived(t, received, 5)); n != 5 {
		t.Errorf("the consumer received %d, want the 5 redriven", n)
	}
}

// TestDLQRedriveInterruptedThenResumed: Ctrl-C (the command's context
// ends) stops a foreground redrive and cancels its job, freeing the
// queue; the error says where it stopped and how to go on — not "rate
// limit: context canceled" — and 'lily dlq resume' continues it after its
// last handled entry (it used to refuse a cancelled job): every entry
// sent exactly once, the ledger balanced.
func TestDLQRedriveInterruptedThenResumed(t *testing.T) {
	t.Parallel()
	db := seedDLQ(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		code     int
		out, err string
	}
	first := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := Run(ctx, []string{"dlq", "redrive", "--db", db, "--rate", "4", "--include-crashers"}, &out, &errb)
		first <- result{code, out.String(), errb.String()}
	}()
	waitJobState(t, db, 1, func(j *redrive.Job) bool { return j.Sent >= 2 })
	cancel() // the operator's Ctrl-C
	r := <-first
	if r.code != 1 || !strings.Contains(r.err, "interrupted: redrive job 1 stopped after") || !strings.Contains(r.err, "continue it with 'lily dlq resume 1'") ||
		strings.Contains(r.err, "context canceled") {
		t.Fatalf("interrupted redrive: exit %d\n%s\n%s", r.code, r.err, r.out)
	}
	received := ackConsumer(t, db)
	code, rout, rerr := run(t, "dlq", "resume", "1", "--db", db, "--json")
	if code != 0 {
		t.Fatalf("resume of the interrupted job: %d %s %s", code, rout, rerr)
	}
	var done redrive.Job
	mustJSON(t, rout, &done)
	if done.State != redrive.JobDone || done.Sent != 6 || done.Done() != done.Total || done.Error != "" {
		t.Errorf("resumed job %+v", done)
	}
	redrivenOnceEach(t, db, received)
	if code, _, errOut := run(t, "dlq", "resume", "1", "--db", db); code != 1 || !strings.Contains(errOut, "nothing to resume") {
		t.Errorf("resume of a finished job: %d %s", code, errOut)
	}
}

// redrivenOnceEach checks the end of a redrive of seedDLQ's six entries:
// the consumer got each entry's message exactly once, every entry is
// redriven, and the ledger balances.
func redrivenOnceEach(t *testing.T, db string, received func() []*transport.Delivery) {
	t.Helper()
	seen := map[string]int{}
	for _, d := range waitReceived(t, received, 6) {
		seen[d.EventID]++
	}
	for i := 1; i <= 6; i++ {
		if id := fmt.Sprintf("evt-%d", i); seen[id] != 1 {
			t.Errorf("%s redriven %d times, want once", id, seen[id])
		}
	}
	if st := entryStates(t, db); st["redriven"] != 6 {
		t.Errorf("states %v", st)
	}
	if code, out, errOut := run(t, "reconcile", "--db", db); code != 0 {
		t.Errorf("reconcile: %d %s %s", code, out, errOut)
	}
}
