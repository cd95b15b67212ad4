package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/transport/transporttest"
)

// startServe runs 'lily serve args...' until the test ends and returns
// the console's base URL.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	return startServeIn(t, context.Background(), args...)
}

// startServeIn is startServe under ctx, which may carry test signals
// (withTestSignals).
func startServeIn(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	var out, errb transporttest.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- Run(ctx, append([]string{"serve"}, args...), &out, &errb) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d: %s", code, errb.String())
		}
		if !strings.Contains(out.String(), "lily serve: stopped") {
			t.Errorf("serve did not stop cleanly: %q", out.String())
		}
	})
	m := awaitAddress(t, &out, &errb, done)
	return m[1] + "://127.0.0.1:" + m[3] // the wildcard addresses include loopback
}

// awaitAddress waits until the server writing out printed the address it
// listens on and returns the match of "on (scheme)://(host):(port)/"; it
// fails the test if the server exits first (its code is put back on done).
func awaitAddress(t *testing.T, out, errb *transporttest.SyncBuffer, done chan int) []string {
	t.Helper()
	re := regexp.MustCompile(`on (https?)://(\S+):(\d+)/`)
	var m []string
	waittest.ForState(t, "serve to print its address", func() (bool, string) {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("serve exited %d before listening: %s%s", code, out.String(), errb.String())
		default:
		}
		m = re.FindStringSubmatch(out.String())
		return m != nil, fmt.Sprintf("stdout %q, stderr %q", out.String(), errb.String())
	})
	return m
}

func getJSON(t *testing.T, method, url, body string, v any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if v != nil {
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("%s %s: %d %v\n%s", method, url, resp.StatusCode, err, data)
		}
	}
	return resp.StatusCode
}

func TestServeRefusesNonLoopbackWithoutTokens(t *testing.T) {
	t.Setenv("LILY_TOKENS", "")
	db := seedDLQ(t)
	code, _, stderr := run(t, "serve", "--db", db, "--listen", "0.0.0.0:0")
	if code != 2 {
		t.Fatalf("exit %d, want 2: %s", code, stderr)
	}
	for _, want := range []string{"--listen 0.0.0.0:0", "no token is configured", "[[token]]", "LILY_TOKENS", "--listen 127.0.0.1:8080"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q: %s", want, stderr)
		}
	}
	if code, _, stderr := run(t, "serve", "--db", db, "--listen", "8080"); code != 2 || !strings.Contains(stderr, "host:port") {
		t.Errorf("--listen 8080: exit %d %s", code, stderr)
	}
	t.Setenv("LILY_TOKENS", "ci:operator:short")
	if code, _, stderr := run(t, "serve", "--db", db, "--listen", "127.0.0.1:0"); code != 2 || !strings.Contains(stderr, "at least 16") {
		t.Errorf("short secret: exit %d %s", code, stderr)
	}
}

func TestServeWithTokensOnAnyAddress(t *testing.T) {
	t.Setenv("LILY_TOKENS", "ci:operator:ci-secret-0123456789")
	db := seedDLQ(t)
	base := startServe(t, "--db", db, "--listen", "0.0.0.0:0")
	var e struct{ Error, Field string }
	if code := getJSON(t, "GET", base+"/api/queues", "", &e); code != http.StatusUnauthorized || e.Field != "Authorization" {
		t.Errorf("without a token: %d %+v", code, e)
	}
}

// TestServeLifecycle serves a catalog in local mode and works through it
// over the API as the console does: health, groups, a dry run, a redrive
// job, a discard; the ledger still balances.
func TestServeLifecycle(t *testing.T) {
	t.Setenv("LILY_TOKENS", "")
	db := seedDLQ(t)
	base := startServe(t, "--db", db, "--listen", "127.0.0.1:0")

	var health struct {
		Status  string
		Reasons []string
	}
	if code := getJSON(t, "GET", base+"/healthz", "", &health); code != 200 || health.Status != "degraded" {
		t.Errorf("healthz: %d %+v", code, health)
	}
	var groups struct{ Total int64 }
	getJSON(t, "GET", base+"/api/groups?by=reason", "", &groups)
	if groups.Total != 6 {
		t.Errorf("groups total %d, want 6", groups.Total)
	}
	var plan struct {
		WouldRedrive int `json:"would_redrive"`
	}
	sel := `{"filter":{"reason":"retries_exhausted"}`
	if code := getJSON(t, "POST", base+"/api/redrives", sel+`,"dry_run":true}`, &plan); code != 200 || plan.WouldRedrive != 2 {
		t.Errorf("dry run: %d %+v", code, plan)
	}
	var job struct {
		ID    int64
		State string
	}
	if code := getJSON(t, "POST", base+"/api/redrives", sel+`,"rate":100}`, &job); code != http.StatusAccepted {
		t.Fatalf("redrive: %d %+v", code, job)
	}
	waittest.Poller{Limit: time.Minute}.For(t, "the redrive job to finish", func() (bool, string) {
		getJSON(t, "GET", base+"/api/redrives/"+fmt.Sprint(job.ID), "", &job)
		if job.State != "running" && job.State != "done" {
			t.Fatalf("job %+v", job)
		}
		return job.State == "done", fmt.Sprintf("%+v", job)
	})
	var dis struct{ Count int }
	if code := getJSON(t, "POST", base+"/api/discard", `{"filter":{"reason":"permanent"},"reason":"malformed"}`, &dis); code != 200 || dis.Count != 3 {
		t.Errorf("discard: %d %+v", code, dis)
	}
	var audit struct {
		Records []struct{ Actor, Action string }
	}
	getJSON(t, "GET", base+"/api/audit?action=discard", "", &audit)
	if len(audit.Records) == 0 || audit.Records[0].Actor != "local" {
		t.Errorf("audit: %+v", audit.Records)
	}
	if st := entryStates(t, db); st["redriven"] != 2 || st["discarded"] != 3 || st["pending"] != 1 {
		t.Errorf("states %v", st)
	}
	if code, out, stderr := run(t, "reconcile", "--db", db); code != 0 {
		t.Errorf("reconcile after serving: exit %d\n%s%s", code, out, stderr)
	}
}
