package cli

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// childBase is the console URL a serve child printed.
func childBase(t *testing.T, c *child) string {
	t.Helper()
	m := regexp.MustCompile(`on (https?)://\S+:(\d+)/`).FindStringSubmatch(c.out.String())
	if m == nil {
		t.Fatalf("serve child printed no address: %q", c.out.String())
	}
	return m[1] + "://127.0.0.1:" + m[2]
}

// TestServeKilledMidJob: a redrive job started over the API of one 'lily
// serve' process, which is killed with SIGKILL halfway; a second replica
// (on the same catalog: SQLite file or PostgreSQL) resumes it after the
// job's lease ran out and finishes it. Every dead letter reaches its
// source queue — at most the batch in flight twice — every entry is
// redriven once in the catalog, and the job finished once.
//
// It runs in parallel (most of it waits on the job's rate and lease): its
// queue, catalog file and PostgreSQL schema are its own, and TestMain
// clears LILY_TOKENS, which the serial serve tests alone set.
func TestServeKilledMidJob(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			serveKilledMidJob(t, kind)
		})
	}
}

func serveKilledMidJob(t *testing.T, kind string) {
	ctx := context.Background()
	url := needRabbit(t)
	qc, cfg, tr := brokerQueue(t, url)
	store, cat := replicaCatalog(t, kind)
	args := append([]string{"--config", cfg, "--listen", "127.0.0.1:0", "--ingest-interval", "50ms", "--ingest-lease-ttl", "2s", "--job-lease", "2s"}, store...)
	const n = 40
	brokerDeadLetter(t, tr, qc, 0, n)
	a := serveChild(t, args...)
	waitEntries(t, cat, qc.Name, n)
	base := childBase(t, a)
	var job struct {
		ID    int64
		State string
		Done  int `json:"done"`
	}
	req := fmt.Sprintf(`{"filter":{"queue":%q},"rate":10,"include_crashers":true}`, qc.Name)
	if code := getJSON(t, "POST", base+"/api/redrives", req, &job); code != http.StatusAccepted {
		t.Fatalf("redrive over the API: %d %+v\n%s", code, job, a.errb.String())
	}
	waittest.ForState(t, "the job to send 8 of its entries", func() (bool, string) {
		getJSON(t, "GET", base+"/api/redrives/"+fmt.Sprint(job.ID), "", &job)
		if job.State == "done" {
			t.Fatalf("job %+v ended before the kill", job)
		}
		return job.Done >= 8, fmt.Sprintf("%+v", job)
	})
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	a.cmd.Wait()
	b := serveChild(t, args...)
	var j *redrive.Job
	waittest.Poller{Limit: time.Minute}.For(t, "the survivor to finish the job", func() (bool, string) {
		var err error
		if j, err = redrive.New(cat).Job(ctx, job.ID); err != nil {
			t.Fatal(err)
		}
		if j.State != redrive.JobDone && j.State != redrive.JobRunning {
			t.Fatalf("job after the kill: %+v\n--- survivor ---\n%s", j, b.errb.String())
		}
		return j.State == redrive.JobDone, fmt.Sprintf("%+v\n--- survivor ---\n%s", j, b.errb.String())
	})
	if j.Sent != n {
		t.Errorf("job sent %d, want %d", j.Sent, n)
	}
	// What reached the source queue: every dead letter, at most once more.
	seen := map[string]int{}
	waittest.ForState(t, "every dead letter back in the source queue", func() (bool, string) {
		ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: qc.Name, Max: 50, Wait: 100 * time.Millisecond, Consumer: "check"})
		if err != nil {
			t.Fatal(err)
		}
		var ss []transport.Settlement
		for _, d := range ds {
			seen[d.EventID]++
			ss = append(ss, transport.Settlement{Delivery: d, Action: transport.Ack})
		}
		if len(ss) > 0 {
			if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
				t.Fatal(err)
			}
		}
		return len(seen) >= n, fmt.Sprintf("%d of %d event IDs received", len(seen), n)
	})
	twice := 0
	for i := range n {
		switch c := seen[fmt.Sprintf("evt-%d", i)]; {
		case c == 0 || c > 2:
			t.Errorf("evt-%d reached the queue %d times", i, c)
		case c == 2:
			twice++
		}
	}
	if twice > 20 {
		t.Errorf("%d messages sent twice: more than the batch in flight", twice)
	}
	if st, _ := cat.CountBy(ctx, "state", catalog.Filter{Queue: qc.Name}); st["redriven"] != n {
		t.Errorf("entry states %v, want %d redriven", st, n)
	}
	js, err := redrive.New(cat).Jobs(ctx, redrive.JobQuery{})
	if err != nil || len(js) != 1 {
		t.Errorf("jobs %+v, %v: want the one job", js, err)
	}
	t.Logf("%s: job %d finished by the survivor after the kill; %d of %d sent twice (the batch in flight)", kind, j.ID, twice, n)
}
