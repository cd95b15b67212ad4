package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/drill"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport"
)

// drillHandler is an HTTP handler for 'lily consume --http' that acks
// everything and records the event IDs it was given: the drill message
// must never reach it.
type drillHandler struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
}

func newDrillHandler(t *testing.T) *drillHandler {
	h := &drillHandler{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.seen = append(h.seen, r.Header.Get("Lily-Event-Id"))
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *drillHandler) saw(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Contains(h.seen, id)
}

// drillSetup is a drilled queue: its configuration, SQLite file and the
// handler of its consumer.
type drillSetup struct {
	cfg, db, queue string
	h              *drillHandler
	// counter, when set, counts what the broker holds for the test's
	// ledger reads instead of 'lily reconcile' (a broker whose API cannot
	// count: Pub/Sub, counted from pstest's records).
	counter transport.InFlightCounter
}

// newDrillSetup writes the configuration of a new queue of kind (extra is
// added to its [[queue]] entry) and declares the queue.
func newDrillSetup(t *testing.T, kind, url, extra string) drillSetup {
	t.Helper()
	db := filepath.Join(t.TempDir(), "lily.db")
	queue := fmt.Sprintf("drill%08x.created", rand.Uint32())
	cfg := sidecarConfig(t, kind, url, "", db, queue)
	if extra != "" {
		cfg = writeConfigAppend(t, cfg, extra)
	}
	openSidecarQueue(t, kind, url, db, demo.QueueConfig(queue, kind, ""))
	return drillSetup{cfg: cfg, db: db, queue: queue, h: newDrillHandler(t)}
}

// writeConfigAppend writes the configuration at path with extra appended
// (keys of its last [[queue]] entry) into a new file.
func writeConfigAppend(t *testing.T, path, extra string) string {
	t.Helper()
	data := readFile(t, path)
	return writeConfig(t, data+extra)
}

// consume starts 'lily consume' on the queue until the test ends.
func (s drillSetup) consume(t *testing.T) {
	t.Helper()
	startConsume(t, "--config", s.cfg, "--queue", s.queue, "--http", s.h.srv.URL, "--metrics", "127.0.0.1:0")
}

// drill runs 'lily drill --json' on the queue and returns its exit code
// and report.
func (s drillSetup) drill(t *testing.T, args ...string) (int, drill.Report, string) {
	t.Helper()
	code, out, errOut := run(t, append([]string{"drill", "--config", s.cfg, "--queue", s.queue, "--json",
		"--timeout", "30s", "--ack-timeout", "30s"}, args...)...)
	var rep drill.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("drill --json: exit %d, not JSON (%v):\n%s\n%s", code, err, out, errOut)
	}
	return code, rep, errOut
}

// step returns the report's step name.
func step(t *testing.T, rep drill.Report, name string) drill.Step {
	t.Helper()
	for _, s := range rep.Steps {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("the report has no step %s: %+v", name, rep.Steps)
	return drill.Step{}
}

// wantSteps checks the steps' names in order and their statuses.
func wantSteps(t *testing.T, rep drill.Report, want map[string]string) {
	t.Helper()
	order := []string{drill.StepPublish, drill.StepDeadLettered, drill.StepCatalog, drill.StepAlert, drill.StepConsole, drill.StepDLQShow, drill.StepRedrive, drill.StepLedger}
	var got []string
	for _, s := range rep.Steps {
		got = append(got, s.Name)
		if w := want[s.Name]; w != "" && s.Status != w {
			t.Errorf("step %s is %s, want %s: %s", s.Name, s.Status, w, s.Detail)
		} else if w == "" && s.Status != drill.Passed {
			t.Errorf("step %s is %s, want passed: %s", s.Name, s.Status, s.Detail)
		}
		if s.Detail == "" {
			t.Errorf("step %s has no detail", s.Name)
		}
	}
	if !slices.Equal(got, order) {
		t.Errorf("steps %v, want %v", got, order)
	}
}

// ledgerOf reads the queue's ledger row with 'lily reconcile --json', or
// with the setup's counter.
func (s drillSetup) ledgerOf(t *testing.T) (ledger.Row, bool) {
	t.Helper()
	if s.counter != nil {
		ctx := context.Background()
		cat, err := catalog.Open(ctx, s.db)
		if err != nil {
			t.Fatal(err)
		}
		defer cat.Close()
		rows, err := ledger.New(cat).Rows(ctx, s.counter)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.Queue == s.queue {
				return r, r.Balanced()
			}
		}
		t.Fatalf("the ledger has no row of %s: %+v", s.queue, rows)
	}
	_, out, errOut := run(t, "reconcile", "--config", s.cfg, "--json")
	var rec reconcileJSON
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("reconcile: %v %s %s", err, out, errOut)
	}
	for _, r := range rec.Queues {
		if r.Queue == s.queue {
			return r, rec.Balanced
		}
	}
	t.Fatalf("reconcile has no row of %s: %s", s.queue, out)
	return ledger.Row{}, false
}

// checkDrillConservation: the drill message was accepted once and ended
// acked (redriven and acked) or discarded with a record; nothing is held
// or in flight and the ledger balances.
func (s drillSetup) checkDrillConservation(t *testing.T, rep drill.Report, acked bool) {
	t.Helper()
	if s.h.saw(rep.EventID) {
		t.Errorf("the consumer's handler was given the drill message %s: the drill path must ack it without the handler", rep.EventID)
	}
	var row ledger.Row
	waittest.ForState(t, "the ledger of the drilled queue to balance", func() (bool, string) {
		r, balanced := s.ledgerOf(t)
		row = r
		return balanced && r.InFlight == 0, fmt.Sprintf("%+v", r)
	})
	want := ledger.Row{Queue: s.queue, Accepted: 1}
	if acked {
		want.Acked = 1
	} else {
		want.Discarded = 1
	}
	if row.Accepted != want.Accepted || row.Acked != want.Acked || row.Discarded != want.Discarded || row.DeadLettered != 0 || row.Lost != 0 {
		t.Errorf("ledger %+v, want the drill message accepted once and %s", row, map[bool]string{true: "acked", false: "discarded"}[acked])
	}
	code, out, errOut := run(t, "dlq", "list", "--config", s.cfg, "--json")
	if code != 0 || strings.Contains(out, `"pending":1`) {
		t.Errorf("dlq list: exit %d, a held entry is left: %s %s", code, out, errOut)
	}
}

// serve starts 'lily serve' on the setup's configuration (after its
// consumer, which creates the catalog) and returns its base URL.
func (s drillSetup) serve(t *testing.T, args ...string) string {
	t.Helper()
	return startServe(t, append([]string{"--config", s.cfg, "--listen", "127.0.0.1:0"}, args...)...)
}

// rules writes the rules of 'lily alerts' (with args) for the setup's
// queue into a file and returns its path.
func (s drillSetup) rules(t *testing.T, args ...string) string {
	t.Helper()
	rules := filepath.Join(t.TempDir(), "rules.yml")
	if code, out, errOut := run(t, append([]string{"alerts", "--config", s.cfg, "--out", rules}, args...)...); code != 0 {
		t.Fatalf("lily alerts: exit %d %s %s", code, out, errOut)
	}
	return rules
}

// awaitAlertData waits until Prometheus evaluates rules and has the
// catalog metrics of 'lily serve' for every queue of setups: a rule
// that does not fire then does not fire on data.
func awaitAlertData(t *testing.T, prom promServer, setups ...drillSetup) {
	t.Helper()
	waittest.ForState(t, "prometheus to load the rules and have lily serve's catalog metrics", func() (bool, string) {
		var groups struct {
			Groups []struct{ Name string } `json:"groups"`
		}
		if err := prom.get("/api/v1/rules", url.Values{}, &groups); err != nil || len(groups.Groups) < len(setups) {
			return false, fmt.Sprintf("rules %+v %v", groups, err)
		}
		for _, s := range setups {
			r, err := prom.query(fmt.Sprintf(`lily_dlq_alarming_entries{queue=%q}`, s.queue))
			if err != nil || len(r) == 0 {
				return false, fmt.Sprintf("%s: %v %v", s.queue, r, err)
			}
		}
		return true, ""
	})
}

// endToEnd drills the setup's queue with everything running — its
// consumer, 'lily serve' at serve (console, ingest), the alert asked with
// alertArgs — and checks that every step passed and nothing is left.
func (s drillSetup) endToEnd(t *testing.T, kind, serve, wantAlert string, alertArgs ...string) {
	t.Helper()
	code, rep, errOut := s.drill(t, append([]string{"--console", serve, "--alert-timeout", "30s"}, alertArgs...)...)
	if code != 0 || !rep.Passed {
		t.Errorf("drill: exit %d, passed %v: %s\n%+v", code, rep.Passed, errOut, rep.Steps)
	}
	wantSteps(t, rep, nil)
	if d := step(t, rep, drill.StepAlert).Detail; !strings.Contains(d, "LilyDLQNotEmpty") || !strings.Contains(d, "firing") || !strings.Contains(d, wantAlert) {
		t.Errorf("alert step %q, want LilyDLQNotEmpty firing at %s", d, wantAlert)
	}
	if d := step(t, rep, drill.StepDeadLettered).Detail; !strings.Contains(d, "invalid_retry_count") {
		t.Errorf("dead_lettered step %q, want its reason", d)
	}
	names := []string{s.queue + ".dlq.v2", s.queue + ".retry.v2.", "LilyBrokerDLQNotIngested"} // RabbitMQ's topology
	if kind == lily.TransportSQLite {
		names = []string{"straight into the catalog of " + s.db}
	}
	for _, name := range append(names, s.queue, "LilyDLQNotEmpty", "lily dlq redrive --config "+s.cfg, "lily dlq discard --config "+s.cfg, "owner: team-checkout") {
		if !strings.Contains(rep.Runbook, name) {
			t.Errorf("the runbook does not name %q:\n%s", name, rep.Runbook)
		}
	}
	s.checkDrillConservation(t, rep, true)
}

// TestDrillSQLiteWithPrometheus: against SQLite, with one real
// Prometheus (its first scrape takes 5 s, so the cases share it)
// evaluating the rules of 'lily alerts' for three queues, each with its
// consumer and 'lily serve':
//   - end to end: every step passes, the alert asked of Prometheus;
//   - a rule that never fires (--dlq-floor 1000): the alert step fails
//     with a timeout and the drill exits 1, the rest passes;
//   - Alertmanager: Prometheus sends its alerts to a real Alertmanager,
//     which the alert step asks.
func TestDrillSQLiteWithPrometheus(t *testing.T) {
	t.Parallel()
	bin := needPrometheus(t)
	fires := newDrillSetup(t, lily.TransportSQLite, "", "")
	never := newDrillSetup(t, lily.TransportSQLite, "", "")
	viaAM := newDrillSetup(t, lily.TransportSQLite, "", "")
	am, amHost := maybeAlertmanager(t)
	targets := map[string]string{}
	serves := map[string]string{}
	var rules []string
	for name, s := range map[string]drillSetup{"fires": fires, "never": never, "am": viaAM} {
		s.consume(t)
		serves[name] = s.serve(t)
		targets[name] = strings.TrimPrefix(serves[name], "http://")
		if name == "never" {
			rules = append(rules, s.rules(t, "--dlq-floor", "1000"))
		} else {
			rules = append(rules, s.rules(t))
		}
	}
	prom := startPrometheusAlerting(t, bin, targets, amHost, rules...)
	awaitAlertData(t, prom, fires, never, viaAM)

	t.Run("end to end", func(t *testing.T) {
		fires.endToEnd(t, lily.TransportSQLite, serves["fires"], "Prometheus at "+prom.base, "--prometheus", prom.base)
	})
	t.Run("a rule that never fires", func(t *testing.T) {
		s := never
		code, rep, errOut := s.drill(t, "--prometheus", prom.base, "--alert-timeout", "3s")
		if code != 1 || rep.Passed {
			t.Errorf("drill: exit %d, passed %v, want exit 1: %s", code, rep.Passed, errOut)
		}
		wantSteps(t, rep, map[string]string{drill.StepAlert: drill.Failed, drill.StepConsole: drill.NotChecked})
		if d := step(t, rep, drill.StepAlert).Detail; !strings.Contains(d, "timed out after 3s awaiting LilyDLQNotEmpty{queue=\""+s.queue+"\"} firing at Prometheus at "+prom.base) {
			t.Errorf("alert detail %q, want the timeout naming the alert and Prometheus", d)
		}
		s.checkDrillConservation(t, rep, true)
	})
	t.Run("alertmanager", func(t *testing.T) {
		if am == "" {
			needPrometheusBin(t, alertmanagerBin, "to receive the drill's alert", "the drill's Alertmanager check is NOT run")
		}
		viaAM.endToEnd(t, lily.TransportSQLite, serves["am"], "Alertmanager at "+am, "--alertmanager", am)
	})
}

// TestDrillRabbitMQEndToEnd: every step passes against RabbitMQ, where
// the dead letter reaches the catalog through the ingest of 'lily serve',
// with a real Prometheus evaluating Lily's rules.
func TestDrillRabbitMQEndToEnd(t *testing.T) {
	t.Parallel()
	url := needRabbit(t)
	bin := needPrometheus(t)
	s := newDrillSetup(t, lily.TransportRabbitMQ, url, "")
	s.consume(t)
	serve := s.serve(t, "--ingest-interval", "200ms")
	prom := startPrometheus(t, bin, map[string]string{"lily-serve": strings.TrimPrefix(serve, "http://")}, s.rules(t))
	awaitAlertData(t, prom, s)
	s.endToEnd(t, lily.TransportRabbitMQ, serve, "Prometheus at "+prom.base, "--prometheus", prom.base)
}

// TestDrillFailsWithoutConsumer: with no consumer nothing dead-letters;
// the drill fails at dead_lettered with a timeout that names what it
// awaited, checks nothing after it and says what it left behind.
func TestDrillFailsWithoutConsumer(t *testing.T) {
	t.Parallel()
	s := newDrillSetup(t, lily.TransportSQLite, "", "")
	code, rep, errOut := s.drill(t, "--timeout", "1s")
	if code != 1 || rep.Passed {
		t.Errorf("drill without a consumer: exit %d, passed %v, want exit 1: %s", code, rep.Passed, errOut)
	}
	wantSteps(t, rep, map[string]string{drill.StepDeadLettered: drill.Failed, drill.StepCatalog: drill.NotChecked, drill.StepAlert: drill.NotChecked,
		drill.StepConsole: drill.NotChecked, drill.StepDLQShow: drill.NotChecked, drill.StepRedrive: drill.NotChecked, drill.StepLedger: drill.Failed})
	d := step(t, rep, drill.StepDeadLettered).Detail
	for _, want := range []string{"timed out after 1s awaiting the dead letter of drill message " + rep.EventID, "still waits in " + s.queue, "is a consumer of " + s.queue + " running?"} {
		if !strings.Contains(d, want) {
			t.Errorf("dead_lettered detail %q does not say %q", d, want)
		}
	}
	if !strings.Contains(errOut, "drill of "+s.queue+" failed at: dead_lettered, ledger") {
		t.Errorf("stderr %q, want the failed steps named", errOut)
	}
	if !strings.Contains(rep.LeftBehind, rep.EventID) {
		t.Errorf("left_behind %q does not name the drill message", rep.LeftBehind)
	}
	// What the report says to do: a consumer dead-letters it, then it is
	// discarded with a record; the handler never sees it.
	if code, out, errOut := run(t, "consume", "--config", s.cfg, "--queue", s.queue, "--http", s.h.srv.URL, "--exit-when-idle", "300ms"); code != 0 {
		t.Fatalf("consume: exit %d %s %s", code, out, errOut)
	}
	if code, out, errOut := run(t, "dlq", "discard", "--config", s.cfg, "--queue", s.queue, "--event-ids", rep.EventID, "--reason", "lily drill"); code != 0 {
		t.Fatalf("discard: exit %d %s %s", code, out, errOut)
	}
	s.checkDrillConservation(t, rep, false)
}

// TestDrillWithoutPrometheusSaysNotChecked: with no Prometheus or
// Alertmanager the alert step is "not_checked", never passed, and the
// text report says so plainly; the other steps pass.
func TestDrillWithoutPrometheusSaysNotChecked(t *testing.T) {
	t.Parallel()
	s := newDrillSetup(t, lily.TransportSQLite, "", "")
	s.consume(t)
	code, out, errOut := run(t, "drill", "--config", s.cfg, "--queue", s.queue, "--timeout", "30s", "--ack-timeout", "30s")
	if code != 0 {
		t.Errorf("drill: exit %d: %s\n%s", code, out, errOut)
	}
	for _, want := range []string{"alert         not_checked", "NOT CHECKED: no Prometheus or Alertmanager URL is configured", "console       not_checked",
		"redrive       passed", "ledger        passed", "drill passed; 2 steps NOT checked: alert, console", "# Runbook: dead letters of " + s.queue} {
		if !strings.Contains(out, want) {
			t.Errorf("the report does not say %q:\n%s", want, out)
		}
	}
	code, rep, _ := s.drill(t)
	if code != 0 {
		t.Errorf("second drill: exit %d", code)
	}
	wantSteps(t, rep, map[string]string{drill.StepAlert: drill.NotChecked, drill.StepConsole: drill.NotChecked})
	// Two drills: each accepted once and acked.
	row, balanced := s.ledgerOf(t)
	if !balanced || row.Accepted != 2 || row.Acked != 2 || row.InFlight != 0 {
		t.Errorf("ledger after two drills %+v (balanced %v), want 2 accepted and acked", row, balanced)
	}
	if s.h.saw(rep.EventID) {
		t.Errorf("the handler was given the drill message")
	}
}

// TestDrillRefusesOrderedQueue: a queue with ordering park or block is
// refused (exit 2, naming the queue, the value and the fix) before
// anything is published; with --allow-ordered the drill runs and holds
// no key.
func TestDrillRefusesOrderedQueue(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"park", "block"} {
		s := newDrillSetup(t, lily.TransportSQLite, "", fmt.Sprintf("ordering = %q\n", mode))
		code, out, errOut := run(t, "drill", "--config", s.cfg, "--queue", s.queue)
		if code != 2 {
			t.Errorf("%s: exit %d, want 2: %s %s", mode, code, out, errOut)
		}
		for _, want := range []string{"queue " + s.queue, fmt.Sprintf("ordering = %q", mode), "--allow-ordered"} {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s: the refusal %q does not name %q", mode, errOut, want)
			}
		}
		if row, balanced := s.ledgerOf(t); row.Accepted != 0 || !balanced {
			t.Errorf("%s: the refused drill published: %+v", mode, row)
		}
		// Told, it runs: the drill message has no key, so it holds none.
		s.consume(t)
		code, rep, errOut := s.drill(t, "--allow-ordered")
		if code != 0 {
			t.Errorf("%s --allow-ordered: exit %d: %s %+v", mode, code, errOut, rep.Steps)
		}
		s.checkDrillConservation(t, rep, true)
		if code, out, _ := run(t, "dlq", "parked", "--config", s.cfg, "--json"); code != 0 || strings.Contains(out, s.queue) {
			t.Errorf("%s: a key is held after the drill: exit %d %s", mode, code, out)
		}
	}
}

// TestDrillFinishDiscard: --finish discard discards the drill's dead
// letter with a record instead of redriving it.
func TestDrillFinishDiscard(t *testing.T) {
	t.Parallel()
	s := newDrillSetup(t, lily.TransportSQLite, "", "")
	s.consume(t)
	code, rep, errOut := s.drill(t, "--finish", "discard")
	if code != 0 {
		t.Errorf("drill: exit %d: %s %+v", code, errOut, rep.Steps)
	}
	var names []string
	for _, st := range rep.Steps {
		names = append(names, st.Name)
		if st.Name == drill.StepDiscard && st.Status != drill.Passed {
			t.Errorf("discard: %+v", st)
		}
	}
	if !slices.Contains(names, drill.StepDiscard) || slices.Contains(names, drill.StepRedrive) {
		t.Errorf("steps %v, want discard in place of redrive", names)
	}
	s.checkDrillConservation(t, rep, false)
}

// TestDrillRunbookNamesRealCommands: every 'lily …' command of a
// runbook skeleton — for each ordering, with every option the drill
// repeats — names commands and flags the CLI has.
func TestDrillRunbookNamesRealCommands(t *testing.T) {
	t.Parallel()
	root := newRoot()
	cmdRe := regexp.MustCompile(`lily [^;()\n]*`)
	checked := 0
	for _, ordering := range []string{lily.OrderingReorder, lily.OrderingPark, lily.OrderingBlock} {
		q := lily.QueueConfig{Name: "orders.created", Ordering: ordering, RetryAttempts: 3}.WithDefaults()
		o := drill.Options{Prometheus: "http://p:9090", Console: "http://c:8080", Finish: drill.FinishDiscard}
		rb := drill.Runbook(q, drillNames(&dlqEnv{}, q, "lily.toml"), o)
		for _, m := range cmdRe.FindAllString(rb, -1) {
			m, _, _ = strings.Cut(m, ", then")
			m, _, _ = strings.Cut(m, " then ")
			m, _, _ = strings.Cut(m, " after the fix")
			words := strings.Fields(strings.TrimPrefix(m, "lily "))
			checked++
			if why := checkHint(root, words); why != "" {
				t.Errorf("ordering %s: runbook command %q: %s", ordering, m, why)
			}
		}
	}
	if checked < 30 {
		t.Errorf("checked %d runbook commands, want every one of three runbooks", checked)
	}
}
