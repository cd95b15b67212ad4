package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
	"github.com/lily-mq/lily/transport/transporttest"
)

// edgeQueueTOML is a queue without retries (a transient failure is
// dead-lettered at once, reason retries_exhausted), delivery_limit 2 and a
// handler timeout of 3 s: what hangs is killed then, what answers does so
// well within it even on a loaded machine.
func edgeQueueTOML(db, name string) string {
	return edgeQueueTimeout(db, name, 3000)
}

func edgeQueueTimeout(db, name string, timeoutMillis int) string {
	return fmt.Sprintf(`db = %q
[[queue]]
name = %q
transport = "sqlite"
delivery_limit = 2
handler_timeout_millis = %d
`, db, name, timeoutMillis)
}

// consumeEdge publishes one message per behaviour (its body names it) to
// a SQLite queue, runs 'lily consume' with handler until idle, and returns
// the dead letters by body, the summary, and the balanced ledger row.
func consumeEdge(t *testing.T, behaviours []string, handler ...string) (map[string]*catalog.Entry, consumeJSON, ledger.Row) {
	t.Helper()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lily.db")
	cfg := writeConfig(t, edgeQueueTOML(db, "edge.q"))
	tr, err := sqlite.Open(ctx, db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q := lily.QueueConfig{Name: "edge.q"}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
		t.Fatal(err)
	}
	var msgs []lily.Message
	for _, b := range behaviours {
		// Foreign-typed headers travel to the handler as JSON.
		msgs = append(msgs, lily.Message{Key: "k-" + b, Type: "edge", Body: []byte(b), Headers: lily.Headers{"n": int32(7), "s": "x"}})
	}
	if err := lily.Publish(ctx, tr, q.Name, msgs); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	args := append([]string{"consume", "--config", cfg, "--queue", "edge.q", "--exit-when-idle", "200ms", "--json"}, handler...)
	code, out, errOut := run(t, args...)
	if code != 0 {
		t.Fatalf("consume exit %d\n%s\n%s", code, out, errOut)
	}
	var sum consumeJSON
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	code, out, errOut = run(t, "reconcile", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("reconcile exit %d\n%s\n%s", code, out, errOut)
	}
	var rec reconcileJSON
	if err := json.Unmarshal([]byte(out), &rec); err != nil || len(rec.Queues) != 1 {
		t.Fatalf("%v %s", err, out)
	}
	row := rec.Queues[0]
	if row.Accepted != int64(len(behaviours)) || row.Acked+row.DeadLettered != row.Accepted || row.Lost != 0 || row.InFlight != 0 {
		t.Fatalf("ledger %+v: want %d accepted, each acked or dead-lettered, lost 0", row, len(behaviours))
	}
	cat, err := catalog.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	entries, err := cat.List(ctx, catalog.Filter{Queue: "edge.q"}, 100)
	if err != nil {
		t.Fatal(err)
	}
	dead := map[string]*catalog.Entry{}
	for _, e := range entries {
		dead[string(e.Body)] = e
	}
	return dead, sum, row
}

// wantDead checks that the message with body b was dead-lettered with
// reason and an error message containing each of texts.
func wantDead(t *testing.T, dead map[string]*catalog.Entry, b, reason string, texts ...string) {
	t.Helper()
	e, ok := dead[b]
	if !ok {
		t.Errorf("%s: not dead-lettered, want reason %s", b, reason)
		return
	}
	if e.Reason != reason {
		t.Errorf("%s: reason %s (%s), want %s", b, e.Reason, e.ErrorMessage, reason)
	}
	for _, s := range texts {
		if !strings.Contains(e.ErrorMessage, s) {
			t.Errorf("%s: error message %q does not contain %q", b, e.ErrorMessage, s)
		}
	}
}

// TestConsumeExecEdges runs a shell command that acks, answers permanent,
// fails with secrets and binary garbage on stderr, kills itself, hangs
// with a child of its own, and checks each outcome: the hanging command's
// whole process group is killed at the handler timeout.
func TestConsumeExecEdges(t *testing.T) {
	t.Parallel()
	pidDir := t.TempDir()
	script := filepath.Join(t.TempDir(), "h.sh")
	err := os.WriteFile(script, []byte(`body=$(cat)
[ -n "$LILY_EVENT_ID" ] && [ "$LILY_QUEUE" = edge.q ] && [ "$LILY_KEY" = "k-$body" ] || { echo "missing metadata" >&2; exit 3; }
case "$body" in
ok) echo '{"n":7,"s":"x"}' | grep -qF "$LILY_HEADERS" || { echo "headers $LILY_HEADERS" >&2; exit 3; }; exit 0 ;;
permanent) echo "order does not validate: amount < 0" >&2; exit 65 ;;
secret) echo "db login failed: postgres://app:hunter2@db/x password=hunter2" >&2; exit 1 ;;
garbage) printf 'boom\001\377\376 \033[31m' >&2; exit 7 ;;
crash) kill -9 $$ ;;
hang) sleep 60 & echo $! > "`+pidDir+`/$LILY_EVENT_ID.pid"; wait ;;
esac
`), 0o755)
	if err != nil {
		t.Fatal(err)
	}
	dead, sum, row := consumeEdge(t, []string{"ok", "permanent", "secret", "garbage", "crash", "hang"}, "--exec", "sh "+script)
	wantDead(t, dead, "permanent", "permanent", "exited 65", "amount < 0")
	wantDead(t, dead, "secret", "retries_exhausted", "exited 1", "db login failed")
	wantDead(t, dead, "garbage", "retries_exhausted", "exited 7", "boom")
	wantDead(t, dead, "crash", "delivery_limit")
	wantDead(t, dead, "hang", "retries_exhausted", "handler timeout")
	if e := dead["secret"]; e != nil && strings.Contains(e.ErrorMessage, "hunter2") {
		t.Errorf("the secret on stderr reached the evidence: %q", e.ErrorMessage)
	}
	if e := dead["garbage"]; e != nil && strings.ContainsAny(e.ErrorMessage, "\x01\x1b") {
		t.Errorf("control characters reached the evidence: %q", e.ErrorMessage)
	}
	if _, ok := dead["ok"]; ok || row.Acked != 1 || row.DeadLettered != 5 {
		t.Errorf("ledger %+v: want ok acked, the other 5 dead-lettered", row)
	}
	if sum.Released != 2 {
		t.Errorf("released %d, want 2 (the crashing command at deliveries 1 and 2)", sum.Released)
	}
	// The hanging command's background child died with its group.
	pids, _ := filepath.Glob(filepath.Join(pidDir, "*.pid"))
	if len(pids) != 1 {
		t.Fatalf("pid files %v, want the one hanging command's child", pids)
	}
	b, _ := os.ReadFile(pids[0])
	var pid int
	fmt.Sscan(string(b), &pid)
	if pid <= 0 {
		t.Fatalf("pid file %s: %q", pids[0], b)
	}
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(stat), ") Z ") {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("the hanging command's child %d survived the handler timeout: %s", pid, stat)
	}
}

// TestConsumeHTTPEdges runs an endpoint that acks, answers permanent by
// status and by JSON, answers JSON that does not decode, resets the
// connection, hangs, and a server that answers bytes that are not HTTP.
func TestConsumeHTTPEdges(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Lily-Event-Id") == "" || r.Header.Get("Lily-Queue") != "edge.q" || r.Header.Get("Lily-Delivery-Count") == "" ||
			r.Header.Get("Lily-Retry-Count") != "0" || r.Header.Get("Lily-Key") != "k-"+string(body) || r.Header.Get("Lily-Headers") != `{"n":7,"s":"x"}` {
			http.Error(w, fmt.Sprintf("missing metadata: %v", r.Header), http.StatusBadRequest)
			return
		}
		switch string(body) {
		case "ok":
			w.WriteHeader(http.StatusOK)
		case "ok-json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"outcome":"ack"}`)
		case "permanent":
			http.Error(w, "order does not validate: amount < 0", http.StatusUnprocessableEntity)
		case "permanent-json":
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, `{"outcome":"permanent","error":"unknown currency XYZ; token Bearer abc.def.ghi"}`)
		case "bad-json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"outcome": perm`)
		case "server-error":
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte("panic: nil map\x00\x01"))
		case "crash":
			resetConn(w)
		case "hang":
			<-r.Context().Done()
		}
	}))
	defer srv.Close()
	dead, sum, row := consumeEdge(t, []string{"ok", "ok-json", "permanent", "permanent-json", "bad-json", "server-error", "crash", "hang"}, "--http", srv.URL)
	wantDead(t, dead, "permanent", "permanent", "422", "amount < 0")
	wantDead(t, dead, "permanent-json", "permanent", "unknown currency XYZ")
	wantDead(t, dead, "bad-json", "retries_exhausted", "not the JSON")
	wantDead(t, dead, "server-error", "retries_exhausted", "500", "panic: nil map")
	wantDead(t, dead, "crash", "delivery_limit")
	wantDead(t, dead, "hang", "retries_exhausted", "handler timeout")
	if e := dead["permanent-json"]; e != nil && strings.Contains(e.ErrorMessage, "abc.def.ghi") {
		t.Errorf("the bearer token reached the evidence: %q", e.ErrorMessage)
	}
	if row.Acked != 2 || row.DeadLettered != 6 || sum.Released != 2 {
		t.Errorf("ledger %+v, released %d: want ok and ok-json acked, 6 dead-lettered, the crash released twice", row, sum.Released)
	}

	// A server whose answer is not HTTP at all: transient.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				c.Write([]byte("\x16\x03\x01garbage, not HTTP\r\n\r\n"))
			}()
		}
	}()
	dead, _, row = consumeEdge(t, []string{"x"}, "--http", "http://"+ln.Addr().String()+"/")
	wantDead(t, dead, "x", "retries_exhausted", "malformed HTTP")
	if row.DeadLettered != 1 {
		t.Errorf("ledger %+v: want the message dead-lettered", row)
	}
}

func TestConsumeBadInput(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, edgeQueueTOML(filepath.Join(t.TempDir(), "x.db"), "edge.q"))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"consume", "--queue", "edge.q", "--exec", "true"}, "--config is required"},
		{[]string{"consume", "--config", cfg, "--exec", "true"}, "--queue is required"},
		{[]string{"consume", "--config", cfg, "--queue", "edge.q"}, "pass --http URL or --exec CMD"},
		{[]string{"consume", "--config", cfg, "--queue", "edge.q", "--exec", "true", "--http", "http://x"}, "pass one handler"},
		{[]string{"consume", "--config", cfg, "--queue", "edge.q", "--http", "ftp://x"}, "want an http:// or https:// URL"},
		{[]string{"consume", "--config", cfg, "--queue", "edge.q", "--exec", "true", "--concurrency", "0"}, "--concurrency 0"},
		{[]string{"consume", "--config", cfg, "--queue", "nope", "--exec", "true"}, "no [[queue]] with that name"},
	} {
		code, _, errOut := run(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// TestConsumeSIGTERM stops a 'lily consume' process with SIGTERM while its
// slow handlers run: it exits 0, the handlers it started finished and were
// acked, nothing else was counted as a delivery; a second run finishes the
// queue, every message handled exactly once, the ledger balanced.
func TestConsumeSIGTERM(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lily.db")
	cfg := writeConfig(t, edgeQueueTimeout(db, "edge.q", 60000))
	tr, err := sqlite.Open(ctx, db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q := lily.QueueConfig{Name: "edge.q"}.WithDefaults()
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{q.Spec()}}); err != nil {
		t.Fatal(err)
	}
	const n = 30
	msgs := make([]lily.Message, n)
	for i := range msgs {
		msgs[i] = lily.Message{Body: []byte(fmt.Sprint(i))}
	}
	if err := lily.Publish(ctx, tr, q.Name, msgs); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	calls := filepath.Join(t.TempDir(), "calls")
	started := filepath.Join(t.TempDir(), "started")
	// sleep 0.3 simulates a slow handler: SIGTERM lands while it runs.
	handler := fmt.Sprintf(`echo "$LILY_EVENT_ID $LILY_DELIVERY_COUNT" >> %s; touch %s; sleep 0.3`, calls, started)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "consume", "--config", cfg, "--queue", "edge.q", "--concurrency", "2", "--exec", handler, "--json")
	var stdout strings.Builder
	var stderr transporttest.SyncBuffer // read while the child writes it
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Until a handler started: the signal then lands mid-handler.
	t.Cleanup(func() { cmd.Process.Kill() }) // a no-op once it exited; frees a hung child
	waittest.Poller{Limit: time.Minute}.For(t, "a handler to start", func() (bool, string) {
		_, err := os.Stat(started)
		return err == nil, stderr.String()
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("consume after SIGTERM: %v\n%s", err, stdout.String())
	}
	var sum consumeJSON
	if err := json.Unmarshal([]byte(stdout.String()), &sum); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	first := strings.Count(readFile(t, calls), "\n")
	if sum.Acked != int64(first) || sum.Acked == 0 || sum.Acked == n || sum.Released != 0 || sum.Retried+sum.DeadLettered != 0 {
		t.Fatalf("after SIGTERM: %+v with %d handler calls; want every started handler acked, some of %d left, nothing released or retried", sum, first, n)
	}
	// The rest, by a second run.
	code, out, errOut := run(t, "consume", "--config", cfg, "--queue", "edge.q", "--exec", handler, "--exit-when-idle", "200ms", "--json")
	if code != 0 {
		t.Fatalf("second consume exit %d\n%s\n%s", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(readFile(t, calls)), "\n")
	seen := map[string]bool{}
	for _, l := range lines {
		id, count, _ := strings.Cut(l, " ")
		if seen[id] || count != "1" {
			t.Errorf("handler call %q: a message handled twice or a delivery counted twice (the stop gave back what no handler saw)", l)
		}
		seen[id] = true
	}
	if len(seen) != n {
		t.Errorf("%d messages handled, want %d", len(seen), n)
	}
	code, out, _ = run(t, "reconcile", "--config", cfg, "--json")
	var rec reconcileJSON
	if err := json.Unmarshal([]byte(out), &rec); code != 0 || err != nil || !rec.Balanced || rec.Queues[0].Acked != n {
		t.Errorf("reconcile exit %d: %s", code, out)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
