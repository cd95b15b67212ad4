package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/sqlitedb"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/rabbitmq"
	"github.com/lily-mq/lily/transport/sqlite"
)

// auditOutcomes sums the audit record counts by action/outcome.
func auditOutcomes(t *testing.T, db string) map[string]int {
	t.Helper()
	code, out, errOut := run(t, "audit", "--db", db, "--json")
	if code != 0 {
		t.Fatalf("audit: %d %s", code, errOut)
	}
	var a struct {
		Records []catalog.AuditRecord `json:"records"`
		Count   int                   `json:"count"`
	}
	mustJSON(t, out, &a)
	if a.Count != len(a.Records) {
		t.Errorf("audit count %d for %d records", a.Count, len(a.Records))
	}
	got := map[string]int{}
	for _, r := range a.Records {
		k := r.Action + "/" + r.Outcome
		if r.DryRun {
			k += "/dry"
		}
		got[k] += r.Count
	}
	return got
}

func TestDLQRedriveSQLite(t *testing.T) {
	t.Parallel()
	db := seedDLQ(t)

	// Dry run: lists, changes nothing, is audited.
	code, out, errOut := run(t, "dlq", "redrive", "--db", db, "--dry-run", "--reason", "permanent", "--json")
	if code != 0 {
		t.Fatalf("dry run: %d %s", code, errOut)
	}
	var dry struct {
		Entries []redriveEntryJSON `json:"entries"`
		redriveJSON
	}
	mustJSON(t, out, &dry)
	if len(dry.Entries) != 3 || dry.Entries[0].Outcome != catalog.OutcomeWouldRedrive || !dry.DryRun || dry.Selected != 3 {
		t.Errorf("dry run JSON %+v", dry)
	}
	// The delivery_limit entry (crash-type poison) is held back, and said so.
	if code, out, _ := run(t, "dlq", "redrive", "--db", db, "--dry-run"); code != 0 || !strings.Contains(out, "would redrive 5 and mark 0 needs_manual") ||
		!strings.Contains(out, "held back 1 delivery_limit entries") || !strings.Contains(out, "--new-consumer-version V, or pass --include-crashers") {
		t.Errorf("human dry run: %s", out)
	}
	if st := entryStates(t, db); st["pending"] != 6 {
		t.Fatalf("states after dry runs: %v", st)
	}

	// A sample, acked by the fixed consumer, then the rest at a rate.
	received := ackConsumer(t, db)
	code, out, errOut = run(t, "dlq", "redrive", "--db", db, "--reason", "permanent", "--sample", "1", "--observe", "1m", "--rate", "100", "--actor", "alice", "--json")
	if code != 0 {
		t.Fatalf("redrive: %d %s\n%s", code, errOut, out)
	}
	var res redriveJSON
	mustJSON(t, out, &res)
	if res.Redriven != 3 || res.Sample == nil || !res.Sample.Clean || len(res.Sample.EventIDs) != 1 || res.Sample.EventIDs[0] != "evt-1" || res.Stopped || res.Job == 0 {
		t.Errorf("redrive JSON %+v (sample %+v)", res, res.Sample)
	}
	if st := entryStates(t, db); st["pending"] != 3 || st["redriven"] != 3 {
		t.Errorf("states %v", st)
	}
	// The messages went back to their source queue, with their event IDs.
	ds := waitReceived(t, received, 3)
	if len(ds) != 3 {
		t.Fatalf("the consumer received %d, want 3", len(ds))
	}
	for i, d := range ds {
		if d.EventID != fmt.Sprintf("evt-%d", i+1) || d.Headers[evidence.HeaderRedriveCount] != int32(1) || d.Headers[evidence.HeaderRetryCount] != int32(0) ||
			d.Headers["source-system"] != "shop-web" || d.Headers[evidence.HeaderReason] != nil {
			t.Errorf("redriven message %s headers %v", d.EventID, d.Headers)
		}
	}
	if code, out, _ := run(t, "reconcile", "--db", db, "--json"); code != 0 || !strings.Contains(out, `"in_flight": 0`) {
		t.Errorf("reconcile after the redrive: %d %s", code, out)
	}
	// An empty selection is not an error.
	code, out, _ = run(t, "dlq", "redrive", "--db", db, "--reason", "permanent")
	if code != 0 || !strings.Contains(out, "nothing to redrive") {
		t.Errorf("empty redrive: %d %s", code, out)
	}
	got := auditOutcomes(t, db)
	want := map[string]int{"redrive/would_redrive/dry": 8, "redrive/redriven": 3, "redrive/observed_clean": 1, "redrive/nothing_selected": 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("audit %v, want %v", got, want)
	}
	if code, out, _ := run(t, "audit", "--db", db, "--action", "redrive", "--since", "1h", "--event-ids"); code != 0 ||
		!strings.Contains(out, "by alice") || !strings.Contains(out, "evt-2, evt-3") || !strings.Contains(out, `"sample":1`) {
		t.Errorf("human audit:\n%s", out)
	}
}

func TestDLQRedriveSampleComesBack(t *testing.T) {
	t.Parallel()
	db := seedDLQ(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// A consumer that still fails: the sample is dead-lettered again.
	tr, err := sqlite.Open(ctx, db, sqlite.Options{PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c, err := lily.NewConsumer(tr, lily.HandlerFunc(func(context.Context, *lily.Delivery) error {
		return lily.Permanent(errors.New("still broken"))
	}), lily.ConsumerOptions{Queue: lily.QueueConfig{Name: dlqQueue}.WithDefaults(), ReceiveWait: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	code, out, errOut := run(t, "dlq", "redrive", "--db", db, "--sample", "2", "--observe", "20s", "--json")
	cancel()
	<-done
	if code != 1 || !strings.Contains(errOut, "dead-lettered again") {
		t.Fatalf("redrive with a failing sample: exit %d\n%s\n%s", code, errOut, out)
	}
	var res redriveJSON
	mustJSON(t, out, &res)
	if !res.Stopped || len(res.Returned) == 0 || res.Redriven != 2 || res.Sample == nil {
		t.Fatalf("JSON %+v", res)
	}
	// The redrive stops at the first sampled message that comes back,
	// evt-1 or evt-2, whichever the consumer fails first: the message
	// names each one that came back.
	for _, r := range res.Returned {
		if !slices.Contains(res.Sample.EventIDs, r.EventID) || !strings.Contains(errOut, r.EventID) {
			t.Errorf("returned %s: not in the sample %v, or not named in %q", r.EventID, res.Sample.EventIDs, errOut)
		}
	}
	// The rest was not touched: 4 still pending, plus the new dead letters.
	st := entryStates(t, db)
	if st["redriven"] != 2 || st["pending"] < 5 {
		t.Errorf("states %v, want 2 redriven and the other 4 (plus the returns) pending", st)
	}
	if got := auditOutcomes(t, db); got["redrive/stopped"] == 0 || got["redrive/redriven"] != 2 {
		t.Errorf("audit %v", got)
	}
	if code, out, errOut := run(t, "reconcile", "--db", db); code != 0 {
		t.Errorf("reconcile after the returned sample: %d %s %s", code, out, errOut)
	}
}

func TestDLQRedriveMissingQueue(t *testing.T) {
	t.Parallel()
	db := seedDLQ(t)
	sqlDB, err := sqlitedb.Open(context.Background(), db, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqlDB.Exec(`DELETE FROM lily_queues WHERE name = ?`, dlqQueue); err != nil {
		t.Fatal(err)
	}
	sqlDB.Close()
	code, out, errOut := run(t, "dlq", "redrive", "--db", db)
	if code != 1 || !strings.Contains(errOut, `queue "orders.created" no longer exists`) || !strings.Contains(errOut, "nothing was sent or changed") {
		t.Errorf("redrive into a missing queue: %d %q %q", code, out, errOut)
	}
	if st := entryStates(t, db); st["pending"] != 6 || len(st) != 1 {
		t.Errorf("states %v, want all 6 pending", st)
	}
	if got := auditOutcomes(t, db); len(got) != 1 || got["redrive/failed"] != 0 {
		t.Errorf("audit %v, want one failed record", got)
	}
}

func TestDLQRedriveNeedsManual(t *testing.T) {
	t.Parallel()
	db := seedDLQ(t)
	cfg := writeConfig(t, fmt.Sprintf("db = %q\n[[queue]]\nname = %q\nmax_redrives = 1\n", db, dlqQueue))
	// Redrive two, then dead-letter them again: the second time they are
	// at max_redrives.
	if code, _, errOut := run(t, "dlq", "redrive", "--config", cfg, "--ids", "1,2"); code != 0 {
		t.Fatalf("redrive: %s", errOut)
	}
	ctx := context.Background()
	tr, err := sqlite.Open(ctx, db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ds, _ := tr.Receive(ctx, &transport.ReceiveParams{Queue: dlqQueue, Max: 10, Consumer: "c"})
	var ss []transport.Settlement
	for _, d := range ds {
		h := transport.CloneHeaders(d.Headers)
		evidence.Record{Reason: evidence.ReasonPermanent, ErrorMessage: "again", RedriveCount: evidence.RedriveCount(h), DeadLetteredAt: time.Now()}.Apply(h)
		ss = append(ss, transport.Settlement{Delivery: d, Action: transport.DeadLetter, Headers: h, Reason: "permanent"})
	}
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil || len(ss) != 2 {
		t.Fatalf("settle %d: %v", len(ss), err)
	}
	tr.Close()
	code, out, errOut := run(t, "dlq", "redrive", "--config", cfg, "--redrive-count", "1", "--json")
	var res redriveJSON
	mustJSON(t, out, &res)
	if code != 0 || res.NeedsManual != 2 || res.Redriven != 0 {
		t.Errorf("redrive at max_redrives: %d %s %+v", code, errOut, res)
	}
	if st := entryStates(t, db); st["needs_manual"] != 2 || st["redriven"] != 2 || st["pending"] != 4 {
		t.Errorf("states %v", st)
	}
	if code, out, _ := run(t, "reconcile", "--db", db); code != 0 {
		t.Errorf("reconcile: %s", out)
	}
}

// TestDLQRedriveMaxRedrivesZero: max_redrives = 0 ("always a manual
// decision") is kept as written (it used to become the default 2): no entry
// is redriven, each becomes needs_manual.
func TestDLQRedriveMaxRedrivesZero(t *testing.T) {
	t.Parallel()
	db := seedDLQ(t)
	cfg := writeConfig(t, fmt.Sprintf("db = %q\n[[queue]]\nname = %q\nmax_redrives = 0\n", db, dlqQueue))
	code, out, errOut := run(t, "dlq", "redrive", "--config", cfg, "--ids", "1,2", "--json")
	var res redriveJSON
	mustJSON(t, out, &res)
	if code != 0 || res.NeedsManual != 2 || res.Redriven != 0 {
		t.Errorf("redrive with max_redrives = 0: exit %d %s %+v, want 2 needs_manual and none redriven", code, errOut, res)
	}
	if st := entryStates(t, db); st["needs_manual"] != 2 || st["redriven"] != 0 || st["pending"] != 4 {
		t.Errorf("states %v, want 2 needs_manual, 4 pending", st)
	}
	if code, out, _ := run(t, "reconcile", "--db", db); code != 0 {
		t.Errorf("reconcile: %s", out)
	}
}

func TestDLQDiscardEraseExpire(t *testing.T) {
	t.Parallel()
	db := seedDLQ(t)
	// Discard: dry run first, then for real.
	code, out, _ := run(t, "dlq", "discard", "--db", db, "--dead-letter-reason", "permanent", "--reason", "bad schema", "--dry-run")
	if code != 0 || !strings.Contains(out, "3 entries would be discarded") {
		t.Errorf("discard dry run: %s", out)
	}
	code, out, errOut := run(t, "dlq", "discard", "--db", db, "--dead-letter-reason", "permanent", "--reason", "bad schema", "--actor", "carol", "--json")
	var d decideJSON
	if code != 0 {
		t.Fatalf("discard: %s", errOut)
	}
	mustJSON(t, out, &struct{ *decideJSON }{&d})
	if d.Count != 3 || d.Reason != "bad schema" || d.Action != "discard" {
		t.Errorf("discard JSON %+v\n%s", d, out)
	}
	code, out, _ = run(t, "dlq", "show", "1", "--db", db)
	if code != 0 || !strings.Contains(out, "discarded: bad schema — by carol") {
		t.Errorf("show after discard:\n%s", out)
	}
	if code, out, _ := run(t, "dlq", "discard", "--db", db, "--key", "nope", "--reason", "x"); code != 0 || !strings.Contains(out, "nothing to discard") {
		t.Errorf("empty discard: %d %s", code, out)
	}
	// Erase a data subject: tombstones.
	code, out, _ = run(t, "dlq", "erase", "--db", db, "--key", "cust-1", "--reason", "request 7")
	if code != 0 || !strings.Contains(out, "2 entries erased") {
		t.Errorf("erase: %s", out)
	}
	code, out, _ = run(t, "dlq", "show", "3", "--db", db, "--json")
	var e entryJSON
	mustJSON(t, out, &e)
	if code != 0 || e.Body.Format != "erased" || len(e.Headers) != 0 || e.ErrorMessage != "" || e.BodySHA256 == "" || e.ErasedAt == nil || e.State != "discarded" {
		t.Errorf("erased entry: %d %+v", code, e)
	}
	// Expire: everything is younger than the retention.
	cfg := writeConfig(t, fmt.Sprintf("db = %q\n[[queue]]\nname = %q\ndlq_retention_hours = 1\n", db, dlqQueue))
	if code, out, _ := run(t, "dlq", "expire", "--config", cfg); code != 0 || !strings.Contains(out, "nothing to expire") {
		t.Errorf("expire: %d %s", code, out)
	}
	// Age the entries by two hours behind Lily's back, then expire.
	sqlDB, err := sqlitedb.Open(context.Background(), db, sqlitedb.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.Exec(`UPDATE lily_dlq_entries SET dead_lettered_at = dead_lettered_at - 7200000`)
	sqlDB.Close()
	code, out, _ = run(t, "dlq", "list", "--config", cfg, "--json")
	if code != 0 || !strings.Contains(out, `"past_half_retention": 3`) {
		t.Errorf("list before expiry: %d %s", code, out)
	}
	code, out, errOut = run(t, "dlq", "expire", "--config", cfg, "--json")
	var x decideJSON
	mustJSON(t, out, &x)
	if code != 0 || x.Count != 3 || x.ByQueue[dlqQueue] != 3 {
		t.Errorf("expire: %d %s %+v", code, errOut, x)
	}
	// cust-1's entries were discarded before the erasure: they stay discarded.
	if st := entryStates(t, db); st["discarded"] != 6 || len(st) != 1 {
		t.Errorf("states %v", st)
	}
	if code, out, _ := run(t, "reconcile", "--db", db, "--json"); code != 0 || !strings.Contains(out, `"discarded": 6`) {
		t.Errorf("reconcile: %s", out)
	}
	got := auditOutcomes(t, db)
	want := map[string]int{"discard/would_discard/dry": 3, "discard/discarded": 3, "discard/nothing_selected": 0, "erase/erased": 2, "expire/expired": 3}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("audit %v, want %v", got, want)
	}
}

func TestEvidenceDecode(t *testing.T) {
	t.Parallel()
	in := `{"x-death":[{"reason":"rejected","queue":"orders","count":3,"exchange":"orders","routing-keys":["orders.created"]}],
		"x-first-death-reason":"rejected","x-first-death-queue":"orders",
		"kafka_dlt-exception-fqcn":"org.example.BadOrder","kafka_dlt-exception-message":"no sku","kafka_dlt-original-topic":"orders","kafka_dlt-original-offset":"42",
		"x-lily-dead-letter-reason":"permanent","x-retry-count":"0"}`
	var out, errb strings.Builder
	cmd := newRoot()
	cmd.SetArgs([]string{"evidence", "decode", "--json"})
	cmd.SetIn(strings.NewReader(in))
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("evidence decode: %v", err)
	}
	var d decodedEvidence
	mustJSON(t, out.String(), &d)
	systems := map[string]foreignJSON{}
	for _, f := range d.Foreign {
		systems[f.System+" "+f.Origin] = f
	}
	if d.Lily.Reason != "permanent" || len(d.Problems) != 1 || !strings.Contains(d.Problems[0], "x-retry-count") {
		t.Errorf("Lily evidence %+v, problems %v", d.Lily, d.Problems)
	}
	if f := systems["rabbitmq x-death[0]"]; f.Reason != "rejected" || f.Count != 3 || f.Source != "orders" {
		t.Errorf("x-death %+v (all: %v)", f, d.Foreign)
	}
	if f := systems["spring-kafka kafka_dlt-*"]; f.ExceptionType != "org.example.BadOrder" || f.Offset == nil || *f.Offset != 42 {
		t.Errorf("spring kafka %+v", f)
	}
	// Human output and bad input.
	for _, c := range []struct {
		in, want string
		code     int
		args     []string
	}{
		{`{"NServiceBus.ExceptionInfo.ExceptionType":"System.Exception","NServiceBus.ExceptionInfo.Message":"boom","NServiceBus.FailedQ":"sales"}`, "nservicebus", 0, nil},
		{`{"__connect.errors.stage":"VALUE_CONVERTER","__connect.errors.topic":"orders"}`, "kafka-connect", 0, nil},
		{`{"x-retry-count":{"i32":3},"x-lily-dead-letter-reason":{"s":"retries_exhausted"}}`, "retries_exhausted", 0, []string{"--typed"}},
		{`{}`, "(none)", 0, nil},
		{`[1,2]`, "want one JSON object", 2, nil},
		{`{"a":1} {"b":2}`, "more than one JSON value", 2, nil},
		{`not json`, "want one JSON object", 2, nil},
	} {
		var out, errb strings.Builder
		root := newRoot()
		root.SetArgs(append([]string{"evidence", "decode"}, c.args...))
		root.SetIn(strings.NewReader(c.in))
		root.SetOut(&out)
		root.SetErr(&errb)
		err := root.Execute()
		code := 0
		var ue *UsageError
		if errors.As(err, &ue) {
			code = 2
		} else if err != nil {
			code = 1
		}
		if code != c.code || !strings.Contains(out.String()+fmt.Sprint(err), c.want) {
			t.Errorf("decode %s: code %d err %v out %q, want %d mentioning %q", c.in, code, err, out.String(), c.code, c.want)
		}
	}
}

// A redrive to a RabbitMQ queue goes to that queue through the default
// exchange, keeps the event ID and is confirmed; a queue deleted from the
// broker stops the redrive with nothing changed.
func TestDLQRedriveRabbitMQ(t *testing.T) {
	t.Parallel()
	url := needRabbit(t)
	ctx := context.Background()
	queue := fmt.Sprintf("redrive%08x.created", rand.Uint32())
	qc := lily.QueueConfig{Name: queue, Transport: lily.TransportRabbitMQ}.WithDefaults()
	cleanupRabbitQueues(t, url, qc)
	rmq, err := rabbitmq.Open(ctx, rabbitmq.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer rmq.Close()
	if err := rmq.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{qc.Spec()}}); err != nil {
		t.Fatal(err)
	}
	// Two dead letters in the catalog, as 'lily dlq ingest' leaves them.
	db := filepath.Join(t.TempDir(), "catalog.db")
	cat, err := catalog.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		h := transport.Headers{"x-death": []any{map[string]any{"reason": "delivery_limit", "queue": queue, "count": int64(5)}}}
		evidence.Record{Reason: evidence.ReasonDeliveryLimit, DeadLetteredAt: time.Now()}.Apply(h)
		e := catalog.NewEntry(queue, transport.Message{EventID: fmt.Sprintf("rmq-%d", i), Key: "k", Type: "t", Body: []byte("b")}, h, "", time.Now())
		if err := cat.Insert(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	cat.Close()
	cfg := writeConfig(t, fmt.Sprintf("db = %q\nrabbitmq_url = %q\n[[queue]]\nname = %q\ntransport = \"rabbitmq\"\n", db, url, queue))
	code, out, errOut := run(t, "dlq", "redrive", "--config", cfg, "--ids", "1", "--json")
	if code != 0 {
		t.Fatalf("redrive: %d %s %s", code, out, errOut)
	}
	ds, err := rmq.Peek(ctx, &rabbitmq.PeekParams{Queue: queue})
	if err != nil || len(ds) != 1 {
		t.Fatalf("the source queue holds %d (%v), want 1", len(ds), err)
	}
	if ds[0].EventID != "rmq-1" || ds[0].MessageID != "rmq-1" || evidence.RedriveCount(ds[0].Headers) != 1 {
		t.Errorf("redriven message %+v", ds[0])
	}
	if dl, _ := rmq.DeadLetterDepth(ctx, queue); dl != 0 {
		t.Errorf("the redrive went to the DLQ too (%d)", dl)
	}
	// Peek shows the catalog's pending entry, then a dead letter still in
	// the broker's DLQ, without consuming it.
	if err := rmq.Publish(ctx, &transport.PublishParams{Queue: rabbitmq.DeadLetterQueue(queue),
		Messages: []transport.Message{{EventID: "in-dlq", Body: []byte(`{"x":1}`), Headers: transport.Headers{"x-lily-dead-letter-reason": "permanent"}}}}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = run(t, "dlq", "peek", "--config", cfg, "--queue", queue, "--json")
	var peek struct {
		Entries []entryJSON `json:"entries"`
	}
	mustJSON(t, out, &peek)
	if code != 0 || len(peek.Entries) != 2 || peek.Entries[0].EventID != "rmq-2" || peek.Entries[1].Location != "broker_dlq" ||
		peek.Entries[1].EventID != "in-dlq" || peek.Entries[1].Reason != "permanent" {
		t.Errorf("peek: %d %s %+v", code, errOut, peek.Entries)
	}
	// Peek's channel is closed when it returns; the broker puts what it
	// looked at back asynchronously, so the depth is polled.
	waittest.ForState(t, "the DLQ to hold its one message again after peek (peek consumes nothing)", func() (bool, string) {
		dl, err := rmq.DeadLetterDepth(ctx, queue)
		return err == nil && dl == 1, fmt.Sprintf("DLQ depth %d (%v)", dl, err)
	})
	// The queue is deleted: the next redrive says so and changes nothing.
	if err := rmq.DeleteQueues(ctx, qc.Spec()); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = run(t, "dlq", "redrive", "--config", cfg, "--include-crashers")
	if code != 1 || !strings.Contains(errOut, "no longer exists on the broker") {
		t.Errorf("redrive into a deleted queue: %d %s", code, errOut)
	}
	if st := entryStates(t, db); st["pending"] != 1 || st["redriven"] != 1 {
		t.Errorf("states %v", st)
	}
	got := auditOutcomes(t, db)
	if got["redrive/redriven"] != 1 || len(got) != 2 {
		t.Errorf("audit %v", got)
	}
}
