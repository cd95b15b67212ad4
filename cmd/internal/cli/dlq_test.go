package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
	"github.com/lily-mq/lily/transport/sqlite"
)

const dlqQueue = "orders.created"

// deadLetter describes one message of seedDLQ and how it failed.
type deadLetter struct {
	key     string
	body    string
	reason  evidence.Reason
	errType string
	errMsg  string
	extra   transport.Headers
}

var seedLetters = []deadLetter{
	{"cust-1", `{"order":1}`, evidence.ReasonPermanent, "*json.SyntaxError", "invalid character 'x' at offset 11", nil},
	{"cust-2", "plain text order 2", evidence.ReasonPermanent, "*json.SyntaxError", "invalid character 'y' at offset 7", nil},
	{"cust-1", "\x00\x01\xffbinary", evidence.ReasonPermanent, "*json.SyntaxError", "invalid character 'z' at offset 3", nil},
	{"cust-3", `{"order":4}`, evidence.ReasonRetriesExhausted, "*net.OpError", "dial tcp 10.0.0.7:5432: connection refused", nil},
	{"cust-4", `{"order":5}`, evidence.ReasonRetriesExhausted, "*net.OpError", "dial tcp 10.0.0.9:5432: connection refused", nil},
	{"cust-5", `{"order":6}`, evidence.ReasonDeliveryLimit, "", "delivered 6 times", transport.Headers{
		"MT-Fault-ExceptionType": "System.TimeoutException", "MT-Fault-Message": "The operation timed out", "MT-Reason": "fault"}},
}

// seedDLQ creates a SQLite store whose queue orders.created had the
// seedLetters published and dead-lettered by a consumer (version v1), so
// that the ledger balances. Entry IDs are 1..6 in seedLetters order.
func seedDLQ(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	db, tr := newSeedStore(t)
	defer tr.Close()
	msgs := make([]transport.Message, len(seedLetters))
	for i, d := range seedLetters {
		msgs[i] = transport.Message{EventID: fmt.Sprintf("evt-%d", i+1), Key: d.key, Type: "order.created", Body: []byte(d.body),
			Headers: transport.Headers{"source-system": "shop-web"}}
	}
	if err := tr.Publish(ctx, &transport.PublishParams{Queue: dlqQueue, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	deadLetterAll(t, tr, len(msgs), func(i int, h transport.Headers) evidence.Reason {
		sl := seedLetters[i]
		for k, v := range sl.extra {
			h[k] = v
		}
		evidence.Record{Reason: sl.reason, ErrorType: sl.errType, ErrorMessage: sl.errMsg, Source: "sqlite/" + dlqQueue,
			DeliveryCount: 1, RetryCount: 2, DeadLetteredAt: time.Now(), Consumer: "orders-consumer", ConsumerVersion: "v1", Host: "h"}.Apply(h)
		return sl.reason
	})
	return db
}

// newSeedStore creates a SQLite store in a temporary lily.db with the
// queue orders.created declared; the caller closes the transport.
func newSeedStore(t *testing.T) (string, *sqlite.Transport) {
	t.Helper()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "lily.db")
	tr, err := sqlite.Open(ctx, db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Declare(ctx, &transport.DeclareParams{Queues: []transport.QueueSpec{{Name: dlqQueue}}}); err != nil {
		tr.Close()
		t.Fatal(err)
	}
	return db, tr
}

// deadLetterAll receives the n messages published to orders.created and
// dead-letters them as a consumer would: the i-th received with the
// headers and reason mark gives it (mark adds the evidence to a copy of
// the message's headers).
func deadLetterAll(t *testing.T, tr *sqlite.Transport, n int, mark func(i int, h transport.Headers) evidence.Reason) {
	t.Helper()
	ctx := context.Background()
	ds, err := tr.Receive(ctx, &transport.ReceiveParams{Queue: dlqQueue, Max: n, Consumer: "seed"})
	if err != nil || len(ds) != n {
		t.Fatalf("receive %d: %v", len(ds), err)
	}
	var ss []transport.Settlement
	for i, d := range ds {
		h := transport.CloneHeaders(d.Headers)
		if h == nil {
			h = transport.Headers{}
		}
		reason := mark(i, h)
		ss = append(ss, transport.Settlement{Delivery: d, Action: transport.DeadLetter, Headers: h, Reason: string(reason)})
	}
	if err := tr.Settle(ctx, &transport.SettleParams{Settlements: ss}); err != nil {
		t.Fatal(err)
	}
}

// listJSON runs 'lily dlq list --config cfg --json' and returns its rows.
func listJSON(t *testing.T, cfg string) []dlqListRow {
	t.Helper()
	code, out, errOut := run(t, "dlq", "list", "--config", cfg, "--json")
	if code != 0 {
		t.Fatalf("list: %d %s", code, errOut)
	}
	var list struct{ Queues []dlqListRow }
	mustJSON(t, out, &list)
	return list.Queues
}

// openCatalog opens the catalog of db for checks.
func openCatalog(t *testing.T, db string) *catalog.Store {
	t.Helper()
	cat, err := catalog.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return cat
}

func entryStates(t *testing.T, db string) map[string]int64 {
	t.Helper()
	n, err := openCatalog(t, db).CountBy(context.Background(), "state", catalog.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mustJSON(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
}

func TestDLQListGroupShowPeek(t *testing.T) {
	t.Parallel()
	db := seedDLQ(t)
	cfg := writeConfig(t, fmt.Sprintf("db = %q\n[[queue]]\nname = %q\nowner = \"team-checkout\"\ndlq_retention_hours = 48\n", db, dlqQueue))

	queues := listJSON(t, cfg)
	if len(queues) != 1 || queues[0].Depth != 6 || queues[0].Owner != "team-checkout" || queues[0].RetentionHours != 48 ||
		queues[0].InflowLastHour != 6 || queues[0].Oldest == nil || queues[0].Deadline.Sub(*queues[0].Oldest) != 48*time.Hour {
		t.Errorf("list %+v", queues)
	}
	if code, out, _ := run(t, "dlq", "list", "--db", db); code != 0 || !strings.Contains(out, "orders.created  6") || !strings.Contains(out, "(none)") {
		t.Errorf("human list: %d\n%s", code, out)
	}

	code, out, _ := run(t, "dlq", "group", "--by", "fingerprint", "--db", db, "--json")
	var g dlqGroupJSON
	mustJSON(t, out, &g)
	if code != 0 || g.Total != 6 || len(g.Groups) != 3 || g.Groups[0].Count != 3 || g.Groups[0].Key != "invalid character <q> at offset <n>" ||
		g.Groups[0].SampleID != 3 || g.Groups[1].Key != "dial tcp <n>:<n>: connection refused" {
		t.Errorf("group by fingerprint: %d %+v", code, g)
	}
	for _, by := range []string{"reason", "error_type", "consumer_version", "source"} {
		code, out, _ := run(t, "dlq", "group", "--by", by, "--db", db)
		if code != 0 || !strings.Contains(out, "6 entries in") {
			t.Errorf("group --by %s: %d\n%s", by, code, out)
		}
	}
	if _, out, _ := run(t, "dlq", "group", "--by", "reason", "--db", db, "--key", "cust-1", "--json"); !strings.Contains(out, `"total": 2`) {
		t.Errorf("group with a filter: %s", out)
	}
	if _, out, _ := run(t, "dlq", "group", "--by", "reason", "--db", db, "--key", "nope"); !strings.Contains(out, "no entries match") {
		t.Errorf("empty group: %s", out)
	}

	code, out, _ = run(t, "dlq", "show", "6", "--db", db, "--json")
	var e entryJSON
	mustJSON(t, out, &e)
	if code != 0 || e.EventID != "evt-6" || e.Evidence.Lily.Reason != "delivery_limit" || e.Evidence.Lily.ConsumerVersion != "v1" ||
		len(e.Evidence.Foreign) != 1 || e.Evidence.Foreign[0].System != evidence.SystemMassTransit ||
		e.Evidence.Foreign[0].ExceptionType != "System.TimeoutException" || e.Body.Format != "json" || e.Headers["source-system"] != `"shop-web" (string)` {
		t.Errorf("show --json: %+v", e)
	}
	for _, c := range []struct {
		id, body, want string
	}{
		{"1", "auto", `"order": 1`},
		{"2", "auto", "body (text, 18 bytes)"},
		{"3", "auto", "body (hex, 9 bytes)"},
		{"1", "hex", "7b 22 6f 72"},
		{"2", "json", "not valid JSON; shown as text"},
		{"6", "auto", "masstransit MT-Fault-*"},
	} {
		code, out, errOut := run(t, "dlq", "show", c.id, "--db", db, "--body", c.body)
		if code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("show %s --body %s: %d %s\n%s", c.id, c.body, code, errOut, out)
		}
	}

	code, out, _ = run(t, "dlq", "peek", "--queue", dlqQueue, "--limit", "2", "--db", db, "--json")
	var peek struct {
		Entries []entryJSON `json:"entries"`
	}
	mustJSON(t, out, &peek)
	if code != 0 || len(peek.Entries) != 2 || peek.Entries[0].ID != 1 || peek.Entries[1].ID != 2 || peek.Entries[0].Location != "catalog" {
		t.Errorf("peek: %d %+v", code, peek.Entries)
	}
	if _, out, _ := run(t, "dlq", "peek", "--queue", dlqQueue, "--state", "discarded", "--db", db); !strings.Contains(out, "no entries of queue "+dlqQueue+" in state discarded") {
		t.Errorf("empty peek: %s", out)
	}
	// Reading never changes anything.
	if st := entryStates(t, db); st["pending"] != 6 {
		t.Errorf("states after reading: %v", st)
	}
}

func TestDLQBadInput(t *testing.T) {
	t.Parallel()
	db := seedDLQ(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "show", "abc", "--db", db}, `"abc" is not an entry ID`},
		{[]string{"dlq", "show", "-3", "--db", db}, "unknown shorthand flag"},
		{[]string{"dlq", "show", "0", "--db", db}, `"0" is not an entry ID`},
		{[]string{"dlq", "show", "--db", db}, "accepts 1 arg(s)"},
		{[]string{"dlq", "show", "1", "--db", db, "--body", "yaml"}, `--body "yaml"`},
		{[]string{"dlq", "peek", "--db", db}, "--queue is required"},
		{[]string{"dlq", "peek", "--queue", "q", "--limit", "0", "--db", db}, "--limit 0"},
		{[]string{"dlq", "peek", "--queue", "q", "--state", "gone", "--db", db}, `"gone" is not a state`},
		{[]string{"dlq", "group", "--db", db}, "--by is required"},
		{[]string{"dlq", "group", "--by", "body", "--db", db}, `--by "body"`},
		{[]string{"dlq", "group", "--by", "reason", "--colour", "red", "--db", db}, "unknown flag: --colour"},
		{[]string{"dlq", "redrive", "--db", db, "--errortype", "x"}, "unknown flag: --errortype"},
		{[]string{"dlq", "redrive", "--db", db, "--ids", "1,x,3"}, `--ids: "x" is not an entry ID`},
		{[]string{"dlq", "redrive", "--db", db, "--older-than", "yesterday"}, `--older-than "yesterday"`},
		{[]string{"dlq", "redrive", "--db", db, "--newer-than", "-5m"}, `--newer-than "-5m"`},
		{[]string{"dlq", "redrive", "--db", db, "--redrive-count", "-4"}, "--redrive-count -4"},
		{[]string{"dlq", "redrive", "--db", db, "--limit", "-1"}, "--limit -1"},
		{[]string{"dlq", "redrive", "--db", db, "--rate", "-5"}, "--rate -5"},
		{[]string{"dlq", "redrive", "--db", db, "--sample", "2"}, "needs --observe"},
		{[]string{"dlq", "redrive", "--db", db, "--observe", "1s"}, "needs --sample"},
		{[]string{"dlq", "redrive", "--db", db, "--sample", "5", "--observe", "1s", "--limit", "2"}, "--sample 5: must be <= --limit 2"},
		{[]string{"dlq", "redrive", "--db", filepath.Join(t.TempDir(), "missing.db")}, "no such database file"},
		{[]string{"dlq", "redrive"}, "no database given"},
		{[]string{"dlq", "discard", "--db", db}, "--reason TEXT is required"},
		{[]string{"dlq", "discard", "--db", db, "--reason", "x", "--state", "redriven"}, "only held entries"},
		{[]string{"dlq", "erase", "--db", db}, "name the data subject"},
		{[]string{"dlq", "erase", "--db", db, "--ids", "7,seven"}, `"seven" is not an entry ID`},
		{[]string{"dlq", "list", "--db", db, "extra"}, `unknown command "extra"`},
		{[]string{"dlq", "expire", "--db", db, "--dry-run=maybe"}, `--dry-run "maybe": want true or false`},
		{[]string{"dlq", "bogus"}, `unknown command "bogus"`},
		{[]string{"audit", "--db", db, "--action", "delete"}, `--action "delete"`},
		{[]string{"audit", "--db", db, "--since", "last week"}, `--since "last week"`},
	}
	for _, c := range cases {
		code, _, errOut := run(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d stderr %q, want exit 2 mentioning %q", c.args, code, errOut, c.want)
		}
	}
	if code, _, errOut := run(t, "dlq", "show", "99", "--db", db); code != 1 || !strings.Contains(errOut, "no entry 99") {
		t.Errorf("show of a missing entry: %d %s", code, errOut)
	}
	// Nothing was changed or audited by the refused commands.
	if st := entryStates(t, db); st["pending"] != 6 {
		t.Errorf("states after bad input: %v", st)
	}
	n := 0
	openCatalog(t, db).EachAudit(context.Background(), catalog.AuditFilter{}, func(*catalog.AuditRecord) error { n++; return nil })
	if n != 0 {
		t.Errorf("%d audit records after refused commands", n)
	}
}
