package catalog

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog/where"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/transport"
)

func bodyEntry(queue, id, msg, body string) *Entry {
	h := evidenceHeaders(evidence.ReasonPermanent, "*errors.errorString", msg, "v1", 1, 0, 0)
	return NewEntry(queue, transport.Message{EventID: id, Key: "k-" + id, Body: []byte(body)}, h, "permanent", testNow)
}

func matchIDs(t *testing.T, s *Store, f Filter) []string {
	t.Helper()
	var out []string
	if err := s.Each(context.Background(), f, func(e *Entry) error { out = append(out, e.EventID); return nil }); err != nil {
		t.Fatalf("Each(%s): %v", f, err)
	}
	return out
}

func TestWhereOnBothStores(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		if err := s.Insert(ctx,
			bodyEntry("q", "a", "m", `{"customer":{"id":"42","vip":true},"total":120.5,"items":[{"sku":"X-1"}],"first name":"Ada","note":null}`),
			bodyEntry("q", "b", "m", `{"customer":{"id":42},"total":80,"items":[]}`),
			bodyEntry("q", "c", "m", `{"customer":{"id":"7"},"total":"120.5"}`),
			bodyEntry("q", "d", "m", `not json {"customer":{"id":"42"}}`),
			bodyEntry("q", "e", "m", "\xff\xfe"),
			bodyEntry("q", "f", "m", `[1,2,3]`),
		); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			expr string
			want []string
		}{
			{`.customer.id == "42"`, []string{"a"}},
			{`.customer.id == 42`, []string{"b"}},
			{`.customer.id != "42"`, []string{"b", "c"}},
			{`.total > 100`, []string{"a"}},
			{`.total <= 80`, []string{"b"}},
			{`.customer.vip == true`, []string{"a"}},
			{`.note == null`, []string{"a"}},
			{`exists(.note)`, []string{"a"}},
			{`.items[0].sku == "X-1"`, []string{"a"}},
			{`."first name" == "Ada"`, []string{"a"}},
			{`not exists(.items)`, []string{"c", "f"}},
			{`.customer.id == "7" or .total == 80`, []string{"b", "c"}},
			{`(.customer.id == "42" or .customer.id == 42) and .total > 100`, []string{"a"}},
		}
		for _, c := range cases {
			w, err := where.Parse(c.expr)
			if err != nil {
				t.Fatalf("where.Parse(%s): %v", c.expr, err)
			}
			if got := matchIDs(t, s, Filter{Where: w}); !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s: got %v, want %v", c.expr, got, c.want)
			}
		}
		// Part of the shared filter: counts and decisions take it too.
		w, _ := where.Parse(`.customer.id == "42"`)
		n, err := s.CountBy(ctx, "reason", Filter{Where: w})
		if err != nil || n["permanent"] != 1 {
			t.Fatalf("CountBy with where: %v %v", n, err)
		}
		res, err := s.Discard(ctx, DecideParams{Filter: Filter{Where: w}, Reason: "test", Actor: "t"})
		if err != nil || res.Count != 1 {
			t.Fatalf("Discard with where: %+v %v", res, err)
		}
		if got := matchIDs(t, s, Filter{States: []State{StateDiscarded}}); !reflect.DeepEqual(got, []string{"a"}) {
			t.Fatalf("discarded: %v", got)
		}
	})
}

func searchIDs(t *testing.T, s *Store, text string, f Filter) []string {
	t.Helper()
	var out []string
	err := s.Search(context.Background(), SearchParams{Text: text, Filter: f}, func(h *SearchHit) error {
		out = append(out, h.Entry.EventID)
		return nil
	})
	if err != nil {
		t.Fatalf("Search(%q): %v", text, err)
	}
	return out
}

// searchRows reads the raw index table: the text it holds per entry.
func searchRows(t *testing.T, s *Store) map[int64]string {
	t.Helper()
	q := `SELECT rowid, text FROM lily_dlq_search`
	if s.Kind() == "postgres" {
		q = `SELECT entry_id, text FROM lily_dlq_search`
	}
	rows, err := s.DB().QueryContext(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var text string
		if err := rows.Scan(&id, &text); err != nil {
			t.Fatal(err)
		}
		out[id] = text
	}
	return out
}

func TestSearchOnBothStores(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		a := bodyEntry("orders", "a", "dial tcp 10.0.0.7:5432: connection refused", `{"customer":{"id":"42"},"password":"hunter2","card":"4111 1111 1111 1111"}`)
		b := bodyEntry("orders", "b", "invalid character 'x' looking for beginning of value", `{"customer":{"id":"43"},"note":"Connection reset by peer"}`)
		c := bodyEntry("payments", "c", "timeout waiting for ledger", "\x00\x01binary")
		if err := s.Insert(ctx, a, b, c); err != nil {
			t.Fatal(err)
		}
		for text, want := range map[string][]string{
			"connection":              {"a", "b"},
			"CONNECTION refused":      {"a"},
			`"connection refused"`:    {"a"},
			`"refused connection"`:    nil,
			"10.0.0.7":                {"a"},
			"conn*":                   {"a", "b"},
			"ledger":                  {"c"},
			"binary":                  nil, // binary (a NUL byte), not text: only the error message is indexed
			"hunter2":                 nil, // redacted before indexing
			"1111":                    {"a"},
			"4111":                    nil, // a card number keeps only its last 4 digits
			"customer 43":             {"b"},
			"orders.created customer": nil,
		} {
			if got := searchIDs(t, s, text, Filter{}); !reflect.DeepEqual(got, want) {
				t.Errorf("search %q: got %v, want %v", text, got, want)
			}
		}
		if got := searchIDs(t, s, "connection", Filter{Queue: "orders", IDs: []int64{b.ID}}); !reflect.DeepEqual(got, []string{"b"}) {
			t.Errorf("search with filter: %v", got)
		}
		w, _ := where.Parse(`.customer.id == "42"`)
		if got := searchIDs(t, s, "connection", Filter{Where: w}); !reflect.DeepEqual(got, []string{"a"}) {
			t.Errorf("search with where: %v", got)
		}
		if err := s.Search(ctx, SearchParams{Text: " ,; "}, func(*SearchHit) error { return nil }); !errors.Is(err, ErrEmptySearch) {
			t.Errorf("empty search: %v", err)
		}
		// The raw body is untouched; the index holds the redacted text only.
		got, _ := s.Get(ctx, a.ID)
		if !strings.Contains(string(got.Body), "hunter2") {
			t.Fatalf("raw body altered: %s", got.Body)
		}
		rows := searchRows(t, s)
		if len(rows) != 3 || strings.Contains(rows[a.ID], "hunter2") || strings.Contains(rows[a.ID], "4111") || !strings.Contains(rows[a.ID], "***") {
			t.Fatalf("index rows: %v", rows)
		}
		// Snippets mark the matches.
		var parts []SnippetPart
		s.Search(ctx, SearchParams{Text: "refused"}, func(h *SearchHit) error { parts = h.Snippet; return nil })
		var marked []string
		for _, p := range parts {
			if p.Match {
				marked = append(marked, p.Text)
			}
		}
		if !reflect.DeepEqual(marked, []string{"refused"}) {
			t.Errorf("snippet %+v", parts)
		}
		// Discard, erase and expire remove the indexed text with the data.
		if _, err := s.Discard(ctx, DecideParams{Filter: Filter{IDs: []int64{a.ID}}, Reason: "gone", Actor: "t"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Erase(ctx, DecideParams{Filter: Filter{IDs: []int64{b.ID}}, Actor: "t"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Expire(ctx, ExpireParams{Queues: []string{"payments"}, Retention: func(string) time.Duration { return time.Millisecond }, Actor: "t"}); err != nil {
			t.Fatal(err)
		}
		if rows := searchRows(t, s); len(rows) != 0 {
			t.Fatalf("index rows left after discard/erase/expire: %v", rows)
		}
		if got := searchIDs(t, s, "connection", Filter{}); got != nil {
			t.Fatalf("search after discard: %v", got)
		}
	})
}

// An older catalog (entries written before the index existed) is indexed
// on open.
func TestSearchBackfill(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		var es []*Entry
		for i := 0; i < 1203; i++ {
			es = append(es, bodyEntry("q", "e"+strings.Repeat("x", i%3)+string(rune('a'+i%26)), "boom", `{"n":"needle"}`))
		}
		if err := s.Insert(ctx, es...); err != nil {
			t.Fatal(err)
		}
		// Make it look old: no index rows, a backfill marker over them.
		if _, err := s.DB().ExecContext(ctx, `DELETE FROM lily_dlq_search`); err != nil {
			t.Fatal(err)
		}
		if _, err := s.db.ExecContext(ctx, `UPDATE lily_search_backfill SET upto = (SELECT MAX(id) FROM lily_dlq_entries), next = 0`); err != nil {
			t.Fatal(err)
		}
		if err := catalogdb.BackfillSearch(ctx, s.db); err != nil {
			t.Fatal(err)
		}
		if n := len(searchRows(t, s)); n != 1203 {
			t.Fatalf("backfilled %d rows, want 1203", n)
		}
		n := 0
		s.Search(ctx, SearchParams{Text: "needle", Limit: 5000}, func(*SearchHit) error { n++; return nil })
		if n != 1203 {
			t.Fatalf("found %d", n)
		}
	})
}

// A durable job keeps its filter as Filter.String: --where survives it.
func TestWhereSurvivesJobFilter(t *testing.T) {
	w, err := where.Parse(`.a.b == "x" and not exists(.c)`)
	if err != nil {
		t.Fatal(err)
	}
	f := Filter{Queue: "q", Where: w}
	back, err := ParseFilter(f.String())
	if err != nil {
		t.Fatal(err)
	}
	if back.Where.String() != w.String() || back.String() != f.String() {
		t.Fatalf("ParseFilter(%s) = %s", f, back)
	}
	var a1, a2 []any
	if f.Where.SQL(&a1) != back.Where.SQL(&a2) || !reflect.DeepEqual(a1, a2) {
		t.Fatal("the parsed expression differs")
	}
}
