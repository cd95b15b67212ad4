package catalog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lily-mq/lily/catalog/where"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/pgtest"
	"github.com/lily-mq/lily/transport"
)

// fillForExport gives s entries of every kind: typed foreign headers, a
// binary body, each state, removed data, a dl_key, and history.
func fillForExport(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	h := evidenceHeaders(evidence.ReasonRetriesExhausted, "*net.OpError", "dial tcp: refused <html>", "v2", 3, 2, 0)
	h["amount"] = transport.Decimal{Scale: 2, Value: 1234}
	h["u8"] = uint8(200)
	h["u32"] = uint32(4000000000)
	h["i16"] = int16(-7)
	h["f32"] = float32(1.5)
	h["when"] = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	h["nested"] = map[string]any{"a": []any{int32(1), "x", nil, []byte{0, 1}}}
	h["nil"] = nil
	foreign := NewEntry("orders", transport.Message{EventID: "f-1", Key: "cust-9", Type: "order", Body: []byte{0xff, 0x00, 'b'}}, h, "", testNow)
	foreign.DLKey = "rabbitmq/orders.dlq/abc"
	var es []*Entry
	es = append(es, foreign)
	for i, st := range []State{StatePending, StatePending, StateParked, StateNeedsManual, StateRedriven, StatePending} {
		e := entry("orders", "e-"+string(rune('a'+i)), evidence.ReasonPermanent, st, "bad <json> & more")
		e.DeadLetteredAt = testNow.Add(time.Duration(i) * time.Second)
		es = append(es, e)
	}
	es = append(es, entry("payments", "p-1", evidence.ReasonPermanent, StatePending, "x"))
	if err := s.Insert(ctx, es...); err != nil {
		t.Fatal(err)
	}
	fixed := func() time.Time { return testNow.Add(time.Hour) }
	if _, err := s.Discard(ctx, DecideParams{Filter: Filter{EventIDs: []string{"e-a"}}, Reason: "bad schema", Actor: "carol", Now: fixed}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Erase(ctx, DecideParams{Filter: Filter{EventIDs: []string{"e-b"}}, Actor: "dpo", Reason: "gdpr", Now: fixed}); err != nil {
		t.Fatal(err)
	}
	// e-f's own triage, with two notes, travels with it.
	for _, note := range []string{"looked at it", "tax service timeouts"} {
		if _, err := s.TriageEntries(ctx, TriageParams{Filter: Filter{EventIDs: []string{"e-f"}}, Actor: "alice", Now: fixed,
			Change: TriageChange{Assignee: strp("alice"), Status: strp("investigating"), Note: note}}); err != nil {
			t.Fatal(err)
		}
	}
	// Two edited versions of e-f's body (lily dlq edit) travel with it.
	var ec *Entry
	s.Each(ctx, Filter{EventIDs: []string{"e-f"}}, func(e *Entry) error { ec = e; return nil })
	for i, body := range []string{`{"total":"12.50"}`, `{"total":12.5}`} {
		if _, err := s.Edit(ctx, EditParams{ID: ec.ID, Body: []byte(body), Reason: fmt.Sprintf("fix %d", i+1), Actor: "erin", Now: fixed}); err != nil {
			t.Fatal(err)
		}
	}
}

func exportAll(t *testing.T, s *Store, f Filter) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := s.Export(context.Background(), &buf, ExportParams{Filter: f, Actor: "t"}); err != nil {
		t.Fatalf("Export: %v", err)
	}
	return buf.Bytes()
}

// comparable drops what an import may change: catalog IDs, audit record
// IDs, and the records of the export and import themselves.
func comparableLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %s: %v", sc.Bytes(), err)
		}
		delete(m, "id")
		var hist []any
		for _, r := range m["history"].([]any) {
			r := r.(map[string]any)
			if r["action"] == ActionImport {
				continue
			}
			delete(r, "id")
			hist = append(hist, r)
		}
		m["history"] = hist
		out = append(out, m)
	}
	return out
}

// rawRows reads the stored bodies and headers byte for byte, by event ID.
func rawRows(t *testing.T, s *Store) map[string][2][]byte {
	t.Helper()
	rows, err := s.DB().QueryContext(context.Background(), `SELECT event_id, body, headers FROM lily_dlq_entries`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][2][]byte{}
	for rows.Next() {
		var id string
		var b, h []byte
		if err := rows.Scan(&id, &b, &h); err != nil {
			t.Fatal(err)
		}
		out[id] = [2][]byte{b, h}
	}
	return out
}

func roundTrip(t *testing.T, from, to *Store) {
	ctx := context.Background()
	fillForExport(t, from)
	exp := exportAll(t, from, Filter{})
	if n := bytes.Count(exp, []byte("\n")); n != 8 {
		t.Fatalf("exported %d lines, want 8:\n%s", n, exp)
	}
	res, err := to.Import(ctx, bytes.NewReader(exp), ImportParams{Name: "dump.ndjson", Actor: "importer"})
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	if res.Lines != 8 || res.Added != 8 || res.Skipped != 0 || res.History == 0 {
		t.Fatalf("import result %+v", res)
	}
	again := exportAll(t, to, Filter{})
	if a, b := comparableLines(t, exp), comparableLines(t, again); !reflect.DeepEqual(a, b) {
		t.Fatalf("round trip differs:\n%v\n%v", a, b)
	}
	if a, b := rawRows(t, from), rawRows(t, to); !reflect.DeepEqual(a, b) {
		t.Fatalf("stored bodies/headers differ:\n%q\n%q", a, b)
	}
	// The edited versions came along, bodies and hashes as stored.
	var ec *Entry
	to.Each(ctx, Filter{EventIDs: []string{"e-f"}}, func(e *Entry) error { ec = e; return nil })
	vs, err := to.Versions(ctx, ec.ID)
	if err != nil || len(vs) != 3 || string(vs[2].Body) != `{"total":12.5}` || vs[2].EditedBy != "erin" || vs[2].PrevSHA256 != vs[1].BodySHA256 {
		t.Fatalf("versions of e-f in the target: %+v %v", vs, err)
	}
	// So did its triage and notes.
	tr, err := to.EntryTriage(ctx, ec)
	if err != nil || tr.Entry == nil || tr.Entry.Assignee != "alice" || tr.Entry.Status != "investigating" || len(tr.Entry.Notes) != 2 || tr.Entry.Notes[1].Note != "tax service timeouts" {
		t.Fatalf("triage of e-f in the target: %+v %v", tr.Entry, err)
	}
	// Typed header values come back with their types.
	var got *Entry
	to.Each(ctx, Filter{EventIDs: []string{"f-1"}}, func(e *Entry) error { got = e; return nil })
	if got.Headers["amount"] != (transport.Decimal{Scale: 2, Value: 1234}) || got.Headers["u8"] != uint8(200) || got.Headers["u32"] != uint32(4000000000) {
		t.Fatalf("typed headers: %#v", got.Headers)
	}
	// The history came along: show's audit lookup finds the discard.
	var hist []string
	to.EachAudit(ctx, AuditFilter{EventID: "e-a"}, func(r *AuditRecord) error { hist = append(hist, r.Action+"/"+r.Actor); return nil })
	if !reflect.DeepEqual(hist, []string{"discard/carol", "import/importer"}) {
		t.Fatalf("history of e-a in the target: %v", hist)
	}
	// Imported entries are searchable; removed data is not indexed.
	n := 0
	to.Search(ctx, SearchParams{Text: "json", Filter: Filter{States: []State{StatePending, StateParked, StateNeedsManual, StateRedriven, StateDiscarded, StateErased}}},
		func(*SearchHit) error { n++; return nil })
	if n != 4 { // e-c..e-f; e-a's and e-b's data were removed, p-1's message is "x"
		t.Fatalf("search after import found %d, want 4", n)
	}
	// Again: every line is a duplicate, nothing added, audited.
	res, err = to.Import(ctx, bytes.NewReader(exp), ImportParams{Name: "dump.ndjson", Actor: "importer"})
	if err != nil || res.Added != 0 || res.Skipped != 8 || res.History != 0 {
		t.Fatalf("second import: %+v %v", res, err)
	}
	var outcomes []string
	to.EachAudit(ctx, AuditFilter{Action: ActionImport}, func(r *AuditRecord) error {
		outcomes = append(outcomes, r.Outcome+":"+r.Detail)
		return nil
	})
	if !reflect.DeepEqual(outcomes, []string{"imported:", "skipped_duplicates:8 duplicate(s) skipped"}) {
		t.Fatalf("import audit: %v", outcomes)
	}
}

func TestExportImportRoundTrip(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		roundTrip(t, s, openStore(t))
	})
	t.Run("sqlite-to-postgres", func(t *testing.T) {
		t.Parallel()
		pg, err := OpenPostgres(context.Background(), pgtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer pg.Close()
		roundTrip(t, openStore(t), pg)
	})
}

func TestExportFilterAndOmit(t *testing.T) {
	eachStore(t, func(t *testing.T, s *Store) {
		fillForExport(t, s)
		var buf bytes.Buffer
		w, _ := where.Parse(`.id == "e-c"`)
		n, err := s.Export(context.Background(), &buf, ExportParams{Filter: Filter{Queue: "orders", Where: w}, OmitBodies: true, Actor: "viewer"})
		if err != nil || n != 1 {
			t.Fatalf("Export: %d %v", n, err)
		}
		var l ExportLine
		if err := json.Unmarshal(buf.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.EventID != "e-c" || l.Body != nil || string(l.Headers) != "null" || !l.BodiesOmitted || l.BodySHA256 == "" {
			t.Fatalf("omitted line: %+v", l)
		}
		// Such an export cannot be imported (it would add entries without data).
		if _, err := openStore(t).Import(context.Background(), &buf, ImportParams{Name: "x"}); !errors.Is(err, ErrBadImport) || !strings.Contains(err.Error(), "line 1: bodies_omitted") {
			t.Fatalf("import of an omitted export: %v", err)
		}
		var rec *AuditRecord
		s.EachAudit(context.Background(), AuditFilter{Action: ActionExport}, func(r *AuditRecord) error { rec = r; return nil })
		if rec == nil || rec.Count != 1 || rec.Actor != "viewer" || rec.Detail != "bodies and headers omitted" {
			t.Fatalf("export audit: %+v", rec)
		}
	})
}

func TestImportRefusesBadLines(t *testing.T) {
	good := `{"format":"lily.dlq.export/v1","queue":"q","event_id":"x","state":"pending","body":"aGk=","body_sha256":"8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4","headers":{},"dead_lettered_at":"2026-11-29T12:00:00Z","updated_at":"2026-11-29T12:00:00Z","history":[]}`
	for in, want := range map[string]string{
		good + "\n{oops\n":                               "line 2: not an export line",
		strings.Replace(good, "v1", "v9", 1):             `line 1: format "lily.dlq.export/v9"`,
		strings.Replace(good, "aGk=", "aGo=", 1):         "line 1: body_sha256",
		strings.Replace(good, `"pending"`, `"gone"`, 1):  `line 1: state "gone"`,
		strings.Replace(good, `{}`, `{"a":{"zz":1}}`, 1): "line 1: headers",
		// Every field goes through the checks of its normal route (issue 37
		// item 2): the triage as POST /api/triage, versions as dlq edit.
		strings.Replace(good, `"history"`, `"triage":{"ticket":"javascript:alert(1)","updated_by":"x","notes":[]},"history"`, 1):                                                                  "line 1: triage.ticket \"javascript:alert(1)\": want an http:// or https:// URL",
		strings.Replace(good, `"history"`, `"triage":{"assignee":" bob","updated_by":"x","notes":[]},"history"`, 1):                                                                               "line 1: triage.assign",
		strings.Replace(good, `"history"`, `"triage":{"status":"done","updated_by":"x","notes":[]},"history"`, 1):                                                                                 `line 1: triage.status "done"`,
		strings.Replace(good, `"history"`, `"triage":{"updated_by":"x","notes":[{"author":"a","note":""}]},"history"`, 1):                                                                         "line 1: triage.notes[0]: note is empty",
		strings.Replace(good, `"history"`, `"versions":[{"version":1,"body":"aGk=","body_sha256":"8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4","reason":" "}],"history"`, 1): "line 1: versions[0]: reason is empty",
		strings.Replace(good, `"event_id":"x"`, `"event_id":"x\u0000y"`, 1):                                                                                                                       `line 1: event_id "x\x00y" holds a NUL character`,
	} {
		s := openStore(t)
		res, err := s.Import(context.Background(), strings.NewReader(in), ImportParams{Name: "f.ndjson"})
		if !errors.Is(err, ErrBadImport) && !strings.Contains(err.Error(), want) || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Import(%s): %v, want %q", in, err, want)
		}
		if strings.HasPrefix(want, "line 2") && res.Added != 1 {
			t.Errorf("the good line before a bad one: %+v", res)
		}
	}
}

// TestExportImportProgress: an export reports the lines written after
// each page and an import what it did after each committed batch, so that
// the CLI can show a long one moving; the last report is the result.
func TestExportImportProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := openStore(t)
	const n = 2*exportPage + 50
	var es []*Entry
	for i := range n {
		es = append(es, NewEntry("orders", transport.Message{EventID: fmt.Sprintf("p-%d", i), Body: []byte(`{}`)},
			evidenceHeaders(evidence.ReasonPermanent, "*errors.errorString", "boom", "v1", 1, 0, 0), "permanent", time.Now()))
	}
	if err := src.Insert(ctx, es...); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	var written []int
	got, err := src.Export(ctx, &buf, ExportParams{Progress: func(w int) { written = append(written, w) }})
	if err != nil || got != n {
		t.Fatalf("export: %d, %v", got, err)
	}
	if want := []int{exportPage, 2 * exportPage, n}; !reflect.DeepEqual(written, want) {
		t.Errorf("export progress %v, want %v", written, want)
	}
	var reports []ImportResult
	res, err := openStore(t).Import(ctx, &buf, ImportParams{Progress: func(r ImportResult) { reports = append(reports, r) }})
	if err != nil || res.Added != n {
		t.Fatalf("import: %+v, %v", res, err)
	}
	if len(reports) != 3 || reports[0].Lines != importBatch || reports[2].Lines != n || reports[2].Added != res.Added {
		t.Errorf("import progress %+v, want after each batch of %d, the last one the result %+v", reports, importBatch, res)
	}
}
