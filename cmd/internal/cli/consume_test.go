package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/redrive/rules"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/nats"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/sqlite"
)

// The sidecar's workload: the demo's classes, small enough for a Python
// process per delivery.
var consumeWorkloadArgs = []string{"--messages", "30", "--malformed", "3", "--flaky", "5", "--hopeless", "2", "--crashing", "2", "--seed", "5"}

func consumeWorkload() ([]lily.Message, []string) {
	return demo.Workload(30, 3, 5, 2, 2, 5)
}

// demoQueueTOML is demo.QueueConfig as a [[queue]] entry, with a handler
// timeout long enough for a Python process per delivery on a loaded
// machine (no handler of the workload hangs; a timeout would turn a
// flaky order into retries_exhausted).
func demoQueueTOML(name, kind string) string {
	return fmt.Sprintf(`[[queue]]
name = %q
transport = %q
retry_attempts = 3
retry_backoff_millis = 20
max_retry_backoff_millis = 80
retry_jitter_ratio = 0.2
delivery_limit = 5
handler_timeout_millis = 60000
owner = "team-checkout"
breaker = false
`, name, kind)
}

// demoHTTPHandler is the demo's order consumer as an HTTP endpoint:
// malformed → 422, a gateway timeout → 503, the retired SKU → a JSON
// "transient" answer, the gift card → the connection reset (a crash).
func demoHTTPHandler(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var o demo.Order
		if err := json.Unmarshal(body, &o); err != nil {
			http.Error(w, "decode order: "+err.Error(), http.StatusUnprocessableEntity)
			return
		}
		if o.SKU == demo.CrashSKU {
			resetConn(w)
			return
		}
		rc, err := strconv.Atoi(r.Header.Get("Lily-Retry-Count"))
		if err != nil || r.Header.Get("Lily-Event-Id") == "" || r.Header.Get("Lily-Queue") == "" {
			http.Error(w, "missing Lily headers", http.StatusBadRequest)
			return
		}
		if rc < o.GatewayTimeouts {
			http.Error(w, "charge order "+o.OrderID+": payment gateway: timeout after 2s", http.StatusServiceUnavailable)
			return
		}
		if o.SKU == demo.HopelessSKU {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"outcome":"transient","error":"inventory service: 503 Service Unavailable for sku %q"}`, o.SKU)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// resetConn drops the request's connection with a TCP reset, as a handler
// process that died leaves it.
func resetConn(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// readmePython writes the Python handler of docs/sidecar.md to a file and returns
// the command that runs it.
func readmePython(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is required under CI=true for the sidecar example of docs/sidecar.md")
		}
		t.Skip("SKIPPING: python3 not found; the sidecar example of docs/sidecar.md needs it")
	}
	// The interpreter itself, not a launcher in front of it: pyenv's shim
	// (a bash script that runs 'pyenv exec') cost 0.36 s of CPU a call
	// here against 0.05 s for the interpreter, and the handler runs once
	// per delivery — most of this package's CPU went to the shim.
	if real, err := exec.Command(py, "-c", "import sys; print(sys.executable)").Output(); err == nil && strings.TrimSpace(string(real)) != "" {
		py = strings.TrimSpace(string(real))
	}
	data, err := os.ReadFile("../../../docs/sidecar.md") // the repository root: cmd/internal/cli is three levels down
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?ms)^```python\n(.*?)^```").FindAllStringSubmatch(string(data), -1)
	if len(m) != 1 {
		t.Fatalf("docs/sidecar.md has %d python blocks, want the sidecar example", len(m))
	}
	p := filepath.Join(t.TempDir(), "handler.py")
	if err := os.WriteFile(p, []byte(m[0][1]), 0o644); err != nil {
		t.Fatal(err)
	}
	return py + " " + p
}

// consumeRun is what one sidecar run of the workload left behind.
type consumeRun struct {
	ledger   ledger.Row
	byReason map[string]int64
	summary  consumeJSON
}

// runConsumeWorkload publishes the workload to a new queue of kind, runs
// 'lily consume' with handler (the --http or --exec flag and its value)
// until the queue is idle, ingests a broker's dead letters, and reconciles.
func runConsumeWorkload(t *testing.T, kind, url string, handler ...string) consumeRun {
	t.Helper()
	return runConsumeWorkloadOn(t, kind, url, "", handler...)
}

// sidecarConfig writes the config of a sidecar test: the demo's queue
// of kind, its SQLite store (or catalog) in db, the broker at url, the
// catalog on the PostgreSQL catalogURL when not empty.
func sidecarConfig(t *testing.T, kind, url, catalogURL, db, queue string) string {
	t.Helper()
	toml := fmt.Sprintf("db = %q\n", db)
	if catalogURL != "" {
		toml += fmt.Sprintf("catalog_url = %q\n", catalogURL)
	}
	switch kind {
	case lily.TransportRabbitMQ:
		toml += fmt.Sprintf("rabbitmq_url = %q\n", url)
	case lily.TransportKafka: // url is the seed broker
		toml += fmt.Sprintf("kafka_brokers = [%q]\n", url)
	case lily.TransportNATS:
		toml += fmt.Sprintf("nats_url = %q\n", url)
	}
	return writeConfig(t, toml+demoQueueTOML(queue, kind))
}

// sidecarQueue is the transport a test publishes to a sidecar's queue
// through, and counts what is left in it with.
type sidecarQueue interface {
	transport.Transport
	transport.Declarer
	transport.InFlightCounter
}

// openSidecarQueue opens the transport of kind in the test's process (the
// SQLite file db, the broker at url), declares qc's queue — deleted from
// a RabbitMQ broker when the test ends — and returns the transport,
// closed when the test ends.
func openSidecarQueue(t *testing.T, kind, url, db string, qc lily.QueueConfig) sidecarQueue {
	t.Helper()
	ctx := context.Background()
	var pub sidecarQueue
	switch kind {
	case lily.TransportSQLite:
		tr, err := sqlite.Open(ctx, db, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		pub = tr
	case lily.TransportRabbitMQ:
		cleanupRabbitQueues(t, url, qc)
		tr, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		pub = tr
	case lily.TransportKafka:
		tr := openTestKafka(t, url)
		tr.Register(qc.Spec())
		pub = tr
	case lily.TransportNATS:
		tr, err := nats.Open(nats.Options{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// The queue's streams go with the test (the retry stream is
			// shared by every queue of the server).
			for _, s := range []string{nats.StreamName(qc.Name), nats.DeadLetterStream(qc.Name)} {
				tr.JetStream().DeleteStream(context.Background(), s)
			}
			tr.Close()
		})
		pub = tr
	}
	if err := pub.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	return pub
}

// runConsumeWorkloadOn is runConsumeWorkload with the catalog on the
// PostgreSQL catalogURL when not empty (a broker transport).
func runConsumeWorkloadOn(t *testing.T, kind, url, catalogURL string, handler ...string) consumeRun {
	t.Helper()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lily.db")
	queue := fmt.Sprintf("sidecar%08x.created", rand.Uint32())
	cfg := sidecarConfig(t, kind, url, catalogURL, db, queue)
	pub := openSidecarQueue(t, kind, url, db, demo.QueueConfig(queue, kind, ""))
	msgs, _ := consumeWorkload()
	if err := lily.Publish(ctx, pub, queue, msgs); err != nil {
		t.Fatal(err)
	}
	open, where := catalog.Open, db
	if catalogURL != "" {
		open, where = catalog.OpenPostgres, catalogURL
	}
	cat, err := open(ctx, where)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	// The sidecar runs until the ledger counts every message of the
	// workload ended (acked or dead-lettered), and is then stopped as
	// SIGTERM stops it: an event to wait on, where --exit-when-idle
	// infers the end from the broker's counts, which can miss a message
	// for a moment under load (the flag has tests of its own).
	args := append([]string{"consume", "--config", cfg, "--queue", queue, "--concurrency", "4", "--version", "sidecar-1.2", "--json"}, handler...)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	type ended struct {
		code        int
		out, errOut string
	}
	done := make(chan ended, 1)
	go func() {
		var o, e bytes.Buffer
		code := Run(runCtx, args, &o, &e)
		done <- ended{code, o.String(), e.String()}
	}()
	var res *ended
	// Bounded by a stall, not by the whole run: the exec handler starts a
	// Python process per delivery, which a loaded CI machine slows to
	// seconds (a run timed out at 30 s with 20 of 30 ended and counting).
	waittest.Poller{Progress: true}.For(t, "the sidecar to end every message of the workload", func() (bool, string) {
		select {
		case r := <-done:
			res = &r
			return true, "consume exited by itself"
		default:
		}
		rows, err := ledger.New(cat).Rows(ctx, pub)
		if err != nil || len(rows) != 1 {
			return false, fmt.Sprintf("ledger %+v (%v)", rows, err)
		}
		return rows[0].Acked+rows[0].DeadLettered == int64(len(msgs)), fmt.Sprintf("ledger %+v", rows[0])
	})
	stop()
	if res == nil {
		r := <-done
		res = &r
	}
	code, out, errOut := res.code, res.out, res.errOut
	if code != 0 {
		t.Fatalf("consume exit %d\n%s\n%s", code, out, errOut)
	}
	var r consumeRun
	if err := json.Unmarshal([]byte(out), &r.summary); err != nil {
		t.Fatalf("consume --json: %v\n%s", err, out)
	}
	if kind != lily.TransportSQLite {
		if code, out, errOut := run(t, "dlq", "ingest", "--config", cfg, "--queue", queue); code != 0 {
			t.Fatalf("ingest exit %d\n%s\n%s", code, out, errOut)
		}
	}
	code, out, errOut = run(t, "reconcile", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("reconcile after consume exit %d\n%s\n%s", code, out, errOut)
	}
	var rec reconcileJSON
	if err := json.Unmarshal([]byte(out), &rec); err != nil || !rec.Balanced || len(rec.Queues) != 1 {
		t.Fatalf("reconcile after consume: %v %s", err, out)
	}
	r.ledger = rec.Queues[0]
	r.byReason, err = cat.CountBy(ctx, "reason", catalog.Filter{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	// The sidecar records the version that acked, for [[redrive_rule]]s.
	if vs, err := rules.New(cat).AckedVersions(ctx, queue); err != nil || len(vs) != 1 || vs[0].Version != "sidecar-1.2" {
		t.Errorf("acked consumer versions of %s: %+v %v, want sidecar-1.2 (the RuntimeRecorder hook)", queue, vs, err)
	}
	return r
}

// demoFirstHalf runs the Go demo on the sidecar's workload, without the
// redrive, and returns its counts.
func demoFirstHalf(t *testing.T, kind string, extra ...string) demo.Result {
	t.Helper()
	args := append([]string{"demo", "--transport", kind, "--no-redrive", "--json", "--db", filepath.Join(t.TempDir(), "demo.db")}, consumeWorkloadArgs...)
	code, out, errOut := run(t, append(args, extra...)...)
	if code != 0 {
		t.Fatalf("demo exit %d\n%s\n%s", code, out, errOut)
	}
	var d demo.Result
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// workloadCounts is what the Go demo's first half counts on the
// workload, whatever the transport: TestConsumeDemoWorkloadSQLite runs
// the demo and checks it against these; the other transports' sidecar
// runs are checked against them without running the demo again (each
// demo run on a broker took a demo's worker processes and, on Kafka, a
// cluster of its own; the demo's transports have tests of their own).
func workloadCounts() demo.Result {
	return demo.Result{Accepted: 30, Acked: 23, DeadLettered: 7,
		DeadLettersByReason: map[string]int64{"permanent": 3, "retries_exhausted": 2, "delivery_limit": 2}}
}

// checkSameAsDemo compares a sidecar run with the Go demo's first half
// (workloadCounts): the same acked, the same dead letters by reason, lost 0.
func checkSameAsDemo(t *testing.T, name string, got consumeRun) {
	t.Helper()
	want := workloadCounts()
	if !reflect.DeepEqual(got.byReason, want.DeadLettersByReason) {
		t.Errorf("%s: dead letters by reason %v, the Go demo %v", name, got.byReason, want.DeadLettersByReason)
	}
	l := got.ledger
	if l.Accepted != want.Accepted || l.Acked != want.Acked || l.DeadLettered != want.DeadLettered || l.Lost != 0 || l.InFlight != 0 {
		t.Errorf("%s: ledger %+v, the Go demo accepted %d, acked %d, dead-lettered %d", name, l, want.Accepted, want.Acked, want.DeadLettered)
	}
	// Each crashing order was handed to the handler delivery_limit times
	// (released after each crash); the broker or the consumer dead-letters
	// the next.
	if got.summary.Released != 2*5 {
		t.Errorf("%s: released %d, want 2 crashing × delivery_limit 5 = 10", name, got.summary.Released)
	}
}

func TestConsumeDemoWorkloadSQLite(t *testing.T) {
	t.Parallel()
	goDemo, want := demoFirstHalf(t, lily.TransportSQLite), workloadCounts()
	if !reflect.DeepEqual(goDemo.DeadLettersByReason, want.DeadLettersByReason) ||
		goDemo.Accepted != want.Accepted || goDemo.Acked != want.Acked || goDemo.DeadLettered != want.DeadLettered {
		t.Fatalf("the Go demo counted accepted %d, acked %d, dead letters %v; want the workload's %d, %d, %v",
			goDemo.Accepted, goDemo.Acked, goDemo.DeadLettersByReason, want.Accepted, want.Acked, want.DeadLettersByReason)
	}
	// The two handlers side by side: each run has its own SQLite file and
	// queue, and most of the exec run waits on a Python process per
	// delivery.
	t.Run("http", func(t *testing.T) {
		t.Parallel()
		srv := demoHTTPHandler(t)
		checkSameAsDemo(t, "http", runConsumeWorkload(t, lily.TransportSQLite, "", "--http", srv.URL+"/orders"))
	})
	t.Run("exec", func(t *testing.T) {
		t.Parallel()
		checkSameAsDemo(t, "exec (the Python of docs/sidecar.md)", runConsumeWorkload(t, lily.TransportSQLite, "", "--exec", readmePython(t)))
	})
}

func TestConsumeDemoWorkloadRabbitMQ(t *testing.T) {
	t.Parallel()
	url := needRabbit(t)
	srv := demoHTTPHandler(t)
	// The Python of docs/sidecar.md runs on SQLite above: the handler is the same
	// process whatever the broker, and its exec path the same code.
	checkSameAsDemo(t, "http", runConsumeWorkload(t, lily.TransportRabbitMQ, url, "--http", srv.URL+"/orders"))
}

// TestConsumeRabbitMQPostgresCatalog runs the sidecar on RabbitMQ with the
// catalog and ledger on PostgreSQL: the Go demo's counts again.
func TestConsumeRabbitMQPostgresCatalog(t *testing.T) {
	t.Parallel()
	url := needRabbit(t)
	pg := pgtest.URL(t)
	srv := demoHTTPHandler(t)
	checkSameAsDemo(t, "http, PostgreSQL catalog", runConsumeWorkloadOn(t, lily.TransportRabbitMQ, url, pg, "--http", srv.URL+"/orders"))
}

// TestConsumeDemoWorkloadKafka: the sidecar on Kafka (kfake), the crashing
// orders counted by the attempt counter: the Go demo's counts.
func TestConsumeDemoWorkloadKafka(t *testing.T) {
	t.Parallel()
	_, brokers := newKafka(t)
	srv := demoHTTPHandler(t)
	checkSameAsDemo(t, "http on Kafka", runConsumeWorkload(t, lily.TransportKafka, strings.Split(brokers, ",")[0], "--http", srv.URL+"/orders"))
}
