package demo_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/internal/soaktest"
)

func TestDemoJSONCountsEachClass(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "demo.db")
	// The workload's classes at either size; the soak run (-tags soak)
	// adds healthy orders between them (the README's demo runs 1000). At
	// 200 (seed 7) the two crashing orders sit at 3 and 142, as far apart
	// as at 400 (9, 213) against the worker's prefetch: a crash on one
	// never counts a delivery of the other, so the restarts stay exact.
	n := soaktest.Pick(200, 400)
	code, out, errOut := run(t, "demo", "--db", db, "--messages", strconv.Itoa(n), "--malformed", "7", "--flaky", "20", "--hopeless", "4", "--crashing", "2", "--seed", "7", "--json")
	if code != 0 {
		t.Fatalf("demo exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	var got demo.Result
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("demo --json output is not one JSON object: %v\n%s", err, out)
	}
	want := map[string]int64{"permanent": 7, "retries_exhausted": 4, "delivery_limit": 2}
	for reason, n := range want {
		if got.DeadLettersByReason[reason] != n {
			t.Errorf("dead letters %s = %d, want %d (the workload class)", reason, got.DeadLettersByReason[reason], n)
		}
	}
	if len(got.DeadLettersByReason) != len(want) {
		t.Errorf("dead letters by reason %v, want only %v", got.DeadLettersByReason, want)
	}
	// Second half: the 7 malformed are discarded with a record; the 4
	// hopeless and 2 crashing are redriven (a sample of 2, then the rest)
	// and acked by the fixed worker.
	if got.Accepted != int64(n) || got.Acked != int64(n-7) || got.DeadLettered != 0 || got.Lost != 0 || got.InFlight != 0 || got.Discarded != 7 {
		t.Errorf("ledger %+v, want accepted %d, acked %d, dead-lettered 0, discarded 7, lost 0", got, n, n-7)
	}
	if got.Redriven != 6 || got.RedriveRounds != 2 || got.NeedsManual != 0 {
		t.Errorf("redriven %d in %d rounds, needs_manual %d; want 6 in 2 rounds, 0", got.Redriven, got.RedriveRounds, got.NeedsManual)
	}
	// Each crashing order kills the worker at deliveries 1..delivery_limit.
	if wantRestarts := 2 * demo.QueueConfig(demo.DefaultQueue, "sqlite", "").Settings().DeliveryLimit; got.WorkerRestarts != wantRestarts {
		t.Errorf("worker restarts %d, want %d", got.WorkerRestarts, wantRestarts)
	}
	// The inbox (demo_inbox.go): every order but the malformed is recorded
	// exactly once. A crashing order is committed before each crash, so
	// its delivery_limit−1 redeliveries and its redrive are absorbed
	// duplicates (more come from the crash collateral: orders committed,
	// not yet acked, when the worker died).
	dl := int64(demo.QueueConfig(demo.DefaultQueue, "sqlite", "").Settings().DeliveryLimit)
	if !got.EffectsExactlyOnce || got.EffectsApplied != int64(n-7) || got.EffectsDistinct != int64(n-7) || got.DuplicatesAbsorbed < 2*dl {
		t.Errorf("inbox: %d orders recorded, %d distinct, %d duplicates absorbed, exactly once %v; want %d, %d, >= %d, true",
			got.EffectsApplied, got.EffectsDistinct, got.DuplicatesAbsorbed, got.EffectsExactlyOnce, n-7, n-7, 2*dl)
	}
	// The database is left for inspection and reconciles on its own.
	code, out, errOut = run(t, "reconcile", "--db", db, "--json")
	if code != 0 {
		t.Fatalf("reconcile exit %d: %s %s", code, out, errOut)
	}
	var rec reconciled
	mustJSON(t, out, &rec)
	if !rec.Balanced || len(rec.Queues) != 1 || rec.Queues[0].Accepted != int64(n) {
		t.Errorf("reconcile after the demo: %s", out)
	}
	// Every decision of the second half is in the audit log.
	code, out, errOut = run(t, "audit", "--db", db, "--json")
	if code != 0 {
		t.Fatalf("audit exit %d: %s", code, errOut)
	}
	counts := audited(t, out)
	want2 := map[string]int{"discard/discarded": 7, "redrive/would_redrive": 6, "redrive/redriven": 6, "redrive/observed_clean": 2}
	if !reflect.DeepEqual(counts, want2) {
		t.Errorf("audit %v, want %v", counts, want2)
	}
}

func TestDemoNoRedrive(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "demo.db")
	code, out, errOut := run(t, "demo", "--db", db, "--messages", "100", "--malformed", "3", "--flaky", "5", "--hopeless", "2", "--crashing", "0", "--no-redrive", "--json")
	if code != 0 {
		t.Fatalf("demo exit %d\n%s\n%s", code, out, errOut)
	}
	var got demo.Result
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Acked != 95 || got.DeadLettered != 5 || got.Discarded != 0 || got.Redriven != 0 || got.RedriveRounds != 0 || got.Lost != 0 {
		t.Errorf("demo --no-redrive: %+v, want acked 95, dead-lettered 5, nothing redriven", got)
	}
}

func TestDemoHumanOutput(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "demo", "--db", filepath.Join(t.TempDir(), "d.db"), "--messages", "100", "--flaky", "5", "--malformed", "2", "--hopeless", "1", "--crashing", "1")
	if code != 0 {
		t.Fatalf("demo exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"orders.created", "dead letters by reason", "delivery_limit", "reconcile: OK", "lost 0",
		"second half", "lily dlq redrive --dry-run: would redrive 2", "redriven 2 in 1 rounds", "2 discarded with a record"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoBadInput(t *testing.T) {
	t.Parallel()
	existing := filepath.Join(t.TempDir(), "exists.db")
	if code, _, _ := run(t, "demo", "--db", existing, "--messages", "1", "--flaky", "0", "--malformed", "0", "--hopeless", "0", "--crashing", "0"); code != 0 {
		t.Fatalf("setup demo failed: %d", code)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--messages", "-1"}, "--messages -1"},
		{[]string{"demo", "--messages", "10", "--flaky", "20"}, "must be <= --messages (10)"},
		{[]string{"demo", "--crashing", "3", "--max-restarts", "2"}, "--max-restarts 2"},
		{[]string{"demo", "--messages", "ten"}, `--messages "ten": want a whole number`},
		{[]string{"demo", "--db", existing}, "the file exists"},
	}
	for _, c := range cases {
		code, _, errOut := run(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d stderr %q, want exit 2 mentioning %q", c.args, code, errOut, c.want)
		}
	}
}

// TestDemoNeedsEmulator: a demo on an in-process broker is refused by
// 'lily demo', which links none, before anything is created: exit 2
// naming the flag, the value and both ways out — the same flags with
// lily-demo, or a real broker.
func TestDemoNeedsEmulator(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--transport", "kafka"}, []string{"--transport kafka without --brokers", "in-process Kafka", "'go run ./cmd/lily-demo --transport kafka'", "or give --brokers host:port"}},
		{[]string{"--transport", "kafka", "--share-group", "workers"}, []string{"'go run ./cmd/lily-demo --transport kafka --share-group workers'"}},
		{[]string{"--transport", "kafka", "--scenario", "ordering"}, []string{"'go run ./cmd/lily-demo --transport kafka --scenario ordering'"}},
		{[]string{"--transport", "sqs"}, []string{"--transport sqs without --url", "SQS emulator", "'go run ./cmd/lily-demo --transport sqs'", "or give --url https://sqs.<region>.amazonaws.com"}},
		{[]string{"--transport", "sqs", "--url", "sqs.local"}, []string{`--transport sqs with --url "sqs.local" (not http(s)://...)`}},
		{[]string{"--transport", "pubsub"}, []string{"--transport pubsub", "Pub/Sub fake", "'go run ./cmd/lily-demo --transport pubsub'"}},
	} {
		db := filepath.Join(t.TempDir(), "demo.db")
		code, out, errOut := lilyDemo(t, append(c.args, "--db", db)...)
		for _, w := range c.want {
			if code != 2 || !strings.Contains(errOut, w) {
				t.Errorf("demo %v: exit %d %q, want exit 2 naming %q", c.args, code, errOut, w)
			}
		}
		if out != "" {
			t.Errorf("demo %v printed %q before refusing", c.args, out)
		}
		if _, err := os.Stat(db); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("demo %v created --db %s before refusing (%v)", c.args, db, err)
		}
	}
}

// TestDemoHelp: 'lily demo --help' sends the demos on in-process brokers
// to lily-demo and promises no in-process Kafka of its own.
func TestDemoHelp(t *testing.T) {
	t.Parallel()
	code, out, _ := lilyDemo(t, "--help")
	for _, w := range []string{"go run ./cmd/lily-demo --transport kafka|sqs|pubsub", "lily links no emulator", "--transport kafka (required here; on an in-process Kafka: go run ./cmd/lily-demo --transport kafka)"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("lily demo --help: exit %d, lacks %q:\n%s", code, w, out)
		}
	}
	if strings.Contains(out, "default: an in-process Kafka") {
		t.Errorf("lily demo --help promises an in-process Kafka:\n%s", out)
	}
}
