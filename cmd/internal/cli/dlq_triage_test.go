package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/transport"
)

// triageStores runs fn on a catalog holding the seedLetters of
// orders.created (entry IDs 1..6): a SQLite store (--db) and a PostgreSQL
// catalog (--catalog); store is the flag pair that names it.
func triageStores(t *testing.T, fn func(t *testing.T, store []string, open func() *catalog.Store)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		db := seedDLQ(t)
		fn(t, []string{"--db", db}, func() *catalog.Store { return openCatalog(t, db) })
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		url := pgtest.URL(t)
		open := func() *catalog.Store { return openCatalog(t, url) }
		var es []*catalog.Entry
		for i, d := range seedLetters {
			h := transport.Headers{"source-system": "shop-web"}
			evidence.Record{Reason: d.reason, ErrorType: d.errType, ErrorMessage: d.errMsg, Source: "sqlite/" + dlqQueue,
				DeliveryCount: 1, RetryCount: 2, DeadLetteredAt: time.Now(), ConsumerVersion: "v1"}.Apply(h)
			es = append(es, catalog.NewEntry(dlqQueue, transport.Message{EventID: fmt.Sprintf("evt-%d", i+1), Key: d.key, Body: []byte(d.body)},
				h, string(d.reason), time.Now()))
		}
		if err := open().Insert(context.Background(), es...); err != nil {
			t.Fatal(err)
		}
		fn(t, []string{"--catalog", url}, open)
	})
}

func TestDLQTriage(t *testing.T) {
	t.Parallel()
	fp := evidence.Fingerprint("invalid character 'x' at offset 11") // entries 1, 2, 3
	triageStores(t, func(t *testing.T, store []string, open func() *catalog.Store) {
		cli := func(args ...string) (int, string, string) { return run(t, append(args, store...)...) }

		// Bad input names the flag, the value and the fix; nothing is recorded.
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"--ids", "4", "--status", "fixed"}, `--status "fixed": want one of investigating, needs_fix, known_issue, wont_fix`},
			{[]string{"--ids", "4", "--ticket", "SHOP-1"}, `--ticket "SHOP-1": want an http:// or https:// URL`},
			{[]string{"--ids", "4", "--ticket", "javascript:alert(1)"}, "want an http:// or https:// URL"},
			{[]string{"--ids", "4"}, "nothing to change"},
			{[]string{"--status", "needs_fix"}, "name what to triage"},
			{[]string{"--fingerprint", "no such thing", "--note", "x"}, "no queue has entries of it yet; name the queue"},
		} {
			if code, _, errOut := cli(append([]string{"dlq", "triage"}, tt.args...)...); code != 2 || !strings.Contains(errOut, tt.want) {
				t.Errorf("triage %v: %d %s, want %q", tt.args, code, errOut, tt.want)
			}
		}

		// Entries: assignee, status, ticket, note.
		code, out, errOut := cli("dlq", "triage", "--ids", "4,5", "--assign", "alice", "--status", "investigating",
			"--ticket", "https://tracker.example.com/OPS-7", "--note", "db failover at 10:02", "--actor", "alice", "--json")
		if code != 0 {
			t.Fatalf("triage entries: %d %s %s", code, out, errOut)
		}
		var res struct {
			Entries []catalog.EntryRef `json:"entries"`
			triageJSON
		}
		mustJSON(t, out, &res)
		if res.Count != 2 || res.Target != "entries" || len(res.Entries) != 2 || res.Entries[0].ID != 4 || *res.Change.Status != "investigating" {
			t.Errorf("triage JSON %+v", res)
		}
		if code, out, _ := cli("dlq", "triage", "--ids", "4", "--status", "needs_fix", "--note", "fix: retry on failover", "--actor", "bob"); code != 0 ||
			!strings.Contains(out, "1 entries triaged: status needs_fix, note added") {
			t.Errorf("second triage: %d %s", code, out)
		}
		// The group of fingerprint fp in orders.created is a known issue.
		code, out, errOut = cli("dlq", "triage", "--queue", dlqQueue, "--fingerprint", fp, "--status", "known_issue",
			"--ticket", "https://tracker.example.com/SHOP-118", "--note", "old mobile app", "--actor", "carol")
		if code != 0 || !strings.Contains(out, "group "+dlqQueue+" / "+fp+" triaged: status known_issue, ticket https://tracker.example.com/SHOP-118, note added") ||
			!strings.Contains(out, "3 held entries in 1 groups now") {
			t.Fatalf("triage group: %d %s %s", code, out, errOut)
		}

		// show: the entry's own triage with its notes, and its group's.
		code, out, _ = cli("dlq", "show", "4", "--json")
		var e entryJSON
		mustJSON(t, out, &e)
		if code != 0 || e.Triage == nil || e.Triage.Status != "needs_fix" || e.Triage.Entry.Assignee != "alice" || e.Triage.Entry.UpdatedBy != "bob" ||
			len(e.Triage.Entry.Notes) != 2 || e.Triage.Entry.Notes[1].Note != "fix: retry on failover" || e.Triage.Group != nil {
			t.Errorf("show 4 triage: %d %+v", code, e.Triage)
		}
		code, out, _ = cli("dlq", "show", "2", "--json")
		e = entryJSON{}
		mustJSON(t, out, &e)
		if code != 0 || e.Triage == nil || e.Triage.Status != "known_issue" || e.Triage.Entry != nil || e.Triage.Group.Ticket != "https://tracker.example.com/SHOP-118" {
			t.Errorf("show 2 triage: %d %+v", code, e.Triage)
		}
		if code, out, _ := cli("dlq", "show", "2"); code != 0 || !strings.Contains(out, "triage status      known_issue") ||
			!strings.Contains(out, "group triage       status known_issue, ticket https://tracker.example.com/SHOP-118 (by carol") ||
			!strings.Contains(out, "carol: old mobile app") {
			t.Errorf("human show 2:\n%s", out)
		}
		if code, out, _ := cli("dlq", "show", "6"); code != 0 || strings.Contains(out, "triage") {
			t.Errorf("show of an untriaged entry mentions triage:\n%s", out)
		}

		// group: the triage of each fingerprint group.
		code, out, _ = cli("dlq", "group", "--by", "fingerprint", "--json")
		var g dlqGroupJSON
		mustJSON(t, out, &g)
		found := false
		for _, gr := range g.Groups {
			if gr.Key == fp {
				found = len(gr.Triage) == 1 && gr.Triage[0].Queue == dlqQueue && gr.Triage[0].Status == "known_issue"
			} else if len(gr.Triage) != 0 {
				t.Errorf("group %s has triage %+v", gr.Key, gr.Triage)
			}
		}
		if code != 0 || !found {
			t.Errorf("group --by fingerprint: %d %s", code, out)
		}
		if code, out, _ := cli("dlq", "group", "--by", "fingerprint", "--queue", dlqQueue); code != 0 || !strings.Contains(out, "known_issue") ||
			!strings.Contains(out, "triage") {
			t.Errorf("human group:\n%s", out)
		}

		// list: known issues apart from the alarming rest.
		code, out, _ = cli("dlq", "list", "--json")
		var list struct{ Queues []dlqListRow }
		mustJSON(t, out, &list)
		if code != 0 || len(list.Queues) != 1 || list.Queues[0].Depth != 6 || list.Queues[0].KnownIssue != 3 || list.Queues[0].Alarming != 3 {
			t.Errorf("list: %d %+v", code, list.Queues)
		}
		// A new dead letter of the fingerprint inherits known_issue.
		h := transport.Headers{}
		evidence.Record{Reason: evidence.ReasonPermanent, ErrorType: "*json.SyntaxError", ErrorMessage: "invalid character 'q' at offset 2", DeadLetteredAt: time.Now()}.Apply(h)
		cat := open()
		if err := cat.Insert(context.Background(), catalog.NewEntry(dlqQueue, transport.Message{EventID: "evt-new", Body: []byte("{")}, h, "", time.Now())); err != nil {
			t.Fatal(err)
		}
		if known, err := cat.KnownIssueHeld(context.Background()); err != nil || known[dlqQueue] != 4 {
			t.Errorf("known issues after a new dead letter: %v, %v", known, err)
		}

		// Every change is audited: who, what, which entries or group.
		code, out, _ = cli("audit", "--action", "triage", "--json")
		var a struct {
			Records []catalog.AuditRecord `json:"records"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &a) != nil || len(a.Records) != 3 {
			t.Fatalf("audit: %d %s", code, out)
		}
		if r := a.Records[0]; r.Actor != "alice" || r.Count != 2 || strings.Join(r.EventIDs, ",") != "evt-4,evt-5" || !strings.Contains(r.Detail, `"ticket":"https://tracker.example.com/OPS-7"`) {
			t.Errorf("first audit record %+v", r)
		}
		if r := a.Records[2]; r.Actor != "carol" || r.Count != 3 || !strings.Contains(r.Selector, `"group"`) || !strings.Contains(r.Detail, "known_issue") {
			t.Errorf("group audit record %+v", r)
		}
		// Clearing a field.
		if code, out, _ := cli("dlq", "triage", "--ids", "4", "--assign", ""); code != 0 || !strings.Contains(out, "assignee cleared") {
			t.Errorf("clear: %d %s", code, out)
		}
	})
}
