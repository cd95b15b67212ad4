package catalog

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/transport"
)

// ErrBadImport is wrapped by the errors of Import about its input.
var ErrBadImport = errors.New("catalog: import")

// MaxImportLine is the default bound of one export line that Import reads
// (64 MiB): room for a body of MaxEditBody (16 MiB, the largest body an
// edit accepts), base64-encoded (4/3), one edited version as large, and
// its headers, evidence, triage and history. A longer line is refused as
// soon as its first MaxImportLine+1 bytes are read, without reading it
// whole: ErrImportLineTooLong.
const MaxImportLine = 64 << 20

// ErrImportLineTooLong is wrapped (with ErrBadImport) when a line of an
// import is longer than its bound.
var ErrImportLineTooLong = errors.New("line too long")

// ImportParams are the arguments of Store.Import.
type ImportParams struct {
	// MaxLine bounds one line in bytes. Defaults to MaxImportLine.
	MaxLine int
	// Queue, when set, puts every imported entry in this queue instead of
	// the one in its line (its source stays).
	Queue string
	// Map puts the entries of a line's queue (the key) in another queue
	// (the value); Queue, when set, wins.
	Map map[string]string
	// Configured reports whether a queue is configured: a line whose
	// queue (after Queue and Map) is not is refused, naming the queue and
	// the fix — an imported entry can be redriven, and a redrive must not
	// reach a queue the configuration does not name (as redirect's "to"
	// must not). Defaults to nil: every queue is taken (a catalog without
	// a configuration).
	Configured func(queue string) bool
	// Name names the input for the audit records and errors (a file).
	Name string
	// Actor is who imports, for the audit records. Defaults to DefaultActor().
	Actor string
	// Op is the operation ID for the audit log. Defaults to NewOp.
	Op string
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// Progress, when set, is called after each committed batch with what
	// the import did so far.
	Progress func(ImportResult)
}

// ImportResult says what an import did.
type ImportResult struct {
	Op string `json:"op"`
	// Lines is the number of entry lines read.
	Lines int `json:"lines"`
	// Added is the number of entries added.
	Added int `json:"added"`
	// Skipped counts the lines whose dead-lettering the catalog already
	// holds (see Import), left out.
	Skipped int `json:"skipped_duplicates"`
	// History is the number of audit records carried over from the lines.
	History int `json:"history_records"`
	// Accounted is the number of added entries whose message the import
	// counted as accepted on its queue in the ledger (dead-lettered or
	// discarded entries the ledger had not counted), so that an export
	// imported into a new catalog balances in 'lily reconcile'.
	Accounted int64 `json:"accounted"`
}

// importBatch is how many lines one import transaction covers.
const importBatch = 200

// Import reads an export (ExportLine per line, NDJSON) from r and adds its
// entries to the catalog with their event IDs, states, evidence, typed
// headers and bodies unchanged, streaming (one batch of lines in memory).
// A line whose dead-lettering the catalog holds already is skipped and
// counted, never added twice: the same dl_key, or — for entries without
// one — the same queue, event ID, body hash, source, coordinates and
// dead-lettering time. Each batch is one transaction with its audit record
// (action "import", the added event IDs); the lines' history records are
// appended to the audit log once each (a record already there — same op,
// time, actor, action, selector and outcome — is not repeated). Lines are
// checked (parseImportLine, p.destination) before any SQL: a bad line
// stops the import with an error naming its line number, every line
// before it committed and none after it; running the import again skips
// the lines already in. Added entries that are dead-lettered or discarded
// are counted as accepted on their queue in the ledger (importAccept).
func (s *Store) Import(ctx context.Context, r io.Reader, p ImportParams) (ImportResult, error) {
	d := catalogdb.NewDecision(p.Op, p.Actor, "", p.Now)
	selm := map[string]string{"file": p.Name, "queue": p.Queue}
	if len(p.Map) > 0 {
		pairs := make([]string, 0, len(p.Map))
		for from, to := range p.Map {
			pairs = append(pairs, from+"="+to)
		}
		sort.Strings(pairs)
		selm["map"] = strings.Join(pairs, ",")
	}
	sel, _ := json.Marshal(selm)
	d.Selector = string(sel)
	out := ImportResult{Op: d.Op}
	br := bufio.NewReaderSize(r, 1<<20)
	lineNo := 0
	var batch []*ExportLine
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := s.importBatch(ctx, d, p, batch, &out)
		batch = batch[:0]
		if err == nil && p.Progress != nil {
			p.Progress(out)
		}
		return err
	}
	maxLine := p.MaxLine
	if maxLine <= 0 {
		maxLine = MaxImportLine
	}
	for {
		raw, err := readLine(br, maxLine)
		if errors.Is(err, ErrImportLineTooLong) {
			if ferr := flush(); ferr != nil {
				return out, ferr
			}
			return out, fmt.Errorf("%w: %s line %d: %w: more than %d bytes, the most one line may hold (catalog.MaxImportLine: a body of up to %d bytes with its evidence); nothing of it or after it was imported",
				ErrBadImport, p.Name, lineNo+1, ErrImportLineTooLong, maxLine, MaxEditBody)
		}
		if len(bytes.TrimSpace(raw)) > 0 {
			lineNo++
			l, lerr := parseImportLine(raw)
			if lerr == nil {
				lerr = p.destination(l)
			}
			if lerr != nil {
				if ferr := flush(); ferr != nil {
					return out, ferr
				}
				return out, fmt.Errorf("%w: %s line %d: %v", ErrBadImport, p.Name, lineNo, lerr)
			}
			out.Lines++
			batch = append(batch, l)
			if len(batch) == importBatch {
				if err := flush(); err != nil {
					return out, err
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return out, fmt.Errorf("catalog: import: read %s: %w", p.Name, err)
		}
	}
	return out, flush()
}

// destination puts l in the queue it is imported into (Queue, else Map,
// else its own) and refuses a queue that is not configured.
func (p ImportParams) destination(l *ExportLine) error {
	from := l.Queue
	switch {
	case strings.TrimSpace(p.Queue) != "":
		l.Queue = p.Queue
	case p.Map[from] != "":
		l.Queue = p.Map[from]
	}
	if p.Configured == nil || p.Configured(l.Queue) {
		return nil
	}
	if l.Queue != from {
		return fmt.Errorf("queue %q (for the line's queue %q): not a [[queue]] of the configuration: import into a configured queue (an imported entry can be redriven there)", l.Queue, from)
	}
	return fmt.Errorf("queue %q: not a [[queue]] of the configuration: map it to a configured queue (--map %s=QUEUE, API map=%s=QUEUE) or put every line in one (--queue QUEUE, API queue=QUEUE); an imported entry can be redriven, and only to a configured queue", from, from, from)
}

// readLine reads one line (with its '\n') from br, holding at most limit
// bytes of it: a longer line is ErrImportLineTooLong once limit+1 bytes of
// it have been read, so a line with no end costs no more than the bound.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		n := len(line) + len(frag)
		if len(frag) > 0 && frag[len(frag)-1] == '\n' {
			n-- // the newline is not part of the bound
		}
		if n > limit {
			return nil, ErrImportLineTooLong
		}
		if need := len(line) + len(frag); need > cap(line) {
			// Double, capped by the bound: the allocations of one line
			// sum to at most twice the bound (append grows a large
			// slice by 1.25, which sums to five times).
			grown := make([]byte, len(line), min(max(2*cap(line), need), limit+1))
			copy(grown, line)
			line = grown
		}
		line = append(line, frag...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// parseImportLine decodes and checks one line.
func parseImportLine(raw []byte) (*ExportLine, error) {
	var l ExportLine
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("not an export line: %v", err)
	}
	switch {
	case l.Format != ExportFormat:
		return nil, fmt.Errorf("format %q: this Lily reads %q (written by 'lily dlq export')", l.Format, ExportFormat)
	case l.BodiesOmitted:
		return nil, errors.New("bodies_omitted: the export left bodies and headers out (a viewer's export); import needs a full export")
	case l.Queue == "" || l.EventID == "":
		return nil, errors.New("queue and event_id are required")
	case !l.State.Valid():
		return nil, fmt.Errorf("state %q: want pending, parked, needs_manual, redriven, discarded or erased", l.State)
	case l.DeadLetteredAt.IsZero():
		return nil, errors.New("dead_lettered_at is required")
	}
	if l.Body != nil {
		sum := sha256.Sum256(l.Body)
		if hex.EncodeToString(sum[:]) != l.BodySHA256 {
			return nil, fmt.Errorf("body_sha256 %q does not match the body (corrupted or edited line)", l.BodySHA256)
		}
	}
	if err := checkImportText(&l); err != nil {
		return nil, err
	}
	if err := checkImportTriage(l.Triage); err != nil {
		return nil, err
	}
	for i, v := range l.Versions {
		switch {
		case v.Version != i+1:
			return nil, fmt.Errorf("versions[%d]: version %d, want %d (versions are numbered 1, 2, ... in order)", i, v.Version, i+1)
		case v.Body != nil && sha256Hex(v.Body) != v.BodySHA256:
			return nil, fmt.Errorf("versions[%d]: body_sha256 %q does not match the body (corrupted or edited line)", i, v.BodySHA256)
		case strings.TrimSpace(v.Reason) == "":
			return nil, fmt.Errorf("versions[%d]: reason is empty: every edit has one ('lily dlq edit' requires it)", i)
		case len(v.Body) > MaxEditBody:
			return nil, fmt.Errorf("versions[%d]: %d bytes, more than the %d an edit accepts (catalog.MaxEditBody)", i, len(v.Body), MaxEditBody)
		}
	}
	if len(l.Headers) > 0 && !bytes.Equal(l.Headers, []byte("null")) {
		if _, err := transport.UnmarshalHeaders(l.Headers); err != nil {
			return nil, fmt.Errorf("headers: %v", err)
		}
	} else {
		l.Headers = nil
	}
	return &l, nil
}

// checkImportText refuses a NUL character in a text field of the line:
// PostgreSQL text holds none, so the insert would fail in the middle of
// its batch with a raw error instead of naming the line.
func checkImportText(l *ExportLine) error {
	fields := [][2]string{{"queue", l.Queue}, {"event_id", l.EventID}, {"key", l.Key}, {"type", l.Type}, {"reason", l.Reason},
		{"error_type", l.ErrorType}, {"error_message", l.ErrorMessage}, {"fingerprint", l.Fingerprint}, {"consumer_version", l.ConsumerVersion},
		{"source", l.Source}, {"source_coords", l.SourceCoords}, {"hold_key", l.HoldKey}, {"dl_key", l.DLKey}, {"decided_by", l.DecidedBy},
		{"decision", l.Decision}, {"body_sha256", l.BodySHA256}}
	if t := l.Triage; t != nil {
		fields = append(fields, [2]string{"triage.updated_by", t.UpdatedBy})
		for _, n := range t.Notes {
			fields = append(fields, [2]string{"triage.notes.author", n.Author}, [2]string{"triage.notes.note", n.Note})
		}
	}
	for _, v := range l.Versions {
		fields = append(fields, [2]string{"versions.reason", v.Reason}, [2]string{"versions.edited_by", v.EditedBy}, [2]string{"versions.op", v.Op})
	}
	for _, h := range l.History {
		fields = append(fields, [2]string{"history.actor", h.Actor}, [2]string{"history.selector", h.Selector}, [2]string{"history.detail", h.Detail},
			[2]string{"history.op", h.Op}, [2]string{"history.action", h.Action}, [2]string{"history.outcome", h.Outcome})
	}
	for _, f := range fields {
		if strings.ContainsRune(f[1], 0) {
			return fmt.Errorf("%s %q holds a NUL character (\\u0000), which no catalog text field can hold", f[0], f[1])
		}
	}
	return nil
}

// checkImportTriage puts an imported triage record through the checks
// of the route that normally writes it (TriageChange.Validate, as POST
// /api/triage and 'lily dlq triage' do): an import must not store what
// the API refuses, such as a javascript: ticket URL the console would
// render as a link.
func checkImportTriage(t *Triage) error {
	if t == nil {
		return nil
	}
	if err := (TriageChange{Assignee: &t.Assignee, Status: &t.Status, Ticket: &t.Ticket}).Validate(); err != nil {
		return fmt.Errorf("triage.%v", err)
	}
	for i, n := range t.Notes {
		if strings.TrimSpace(n.Note) == "" {
			return fmt.Errorf("triage.notes[%d]: note is empty: a triage note says something", i)
		}
		if err := (TriageChange{Note: n.Note}).Validate(); err != nil {
			return fmt.Errorf("triage.notes[%d]: %v", i, err)
		}
	}
	return nil
}

const importSQL = `INSERT INTO lily_dlq_entries
	(queue, event_id, msg_key, msg_type, body, headers, body_sha256, reason, error_type,
	 error_message, fingerprint, consumer_version, source, delivery_count, retry_count,
	 redrive_count, state, dead_lettered_at, updated_at, dl_key, hold_key, source_coords,
	 duplicates, decided_at, decided_by, decision, erased_at, body_size, headers_size)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT DO NOTHING RETURNING id`

// importKeys are the keys of an import batch's transaction: each line's
// identity (the one importDuplicate checks) and each history record's
// (importHistory's), so that two imports of one file check and write one
// after the other line by line, and imports of other lines never wait.
func importKeys(batch []*ExportLine, p ImportParams) []string {
	var keys []string
	for _, l := range batch {
		if l.DLKey != "" {
			keys = append(keys, "import:dl\x1f"+l.DLKey)
		} else {
			keys = append(keys, strings.Join([]string{"import:entry", lineQueue(l, p.Queue), l.EventID, l.BodySHA256, l.Source, l.SourceCoords,
				strconv.FormatInt(l.DeadLetteredAt.UnixMilli(), 10)}, "\x1f"))
		}
		for _, h := range l.History {
			keys = append(keys, strings.Join([]string{"import:audit", strconv.FormatInt(h.At.UnixMilli(), 10), h.Op, h.Actor, h.Action, h.Selector, h.Outcome}, "\x1f"))
		}
	}
	return keys
}

func (s *Store) importBatch(ctx context.Context, d catalogdb.Decision, p ImportParams, batch []*ExportLine, out *ImportResult) error {
	return s.db.WithKeyed(ctx, importKeys(batch, p), func(tx *catalogdb.Tx) error {
		x := catalogdb.NewIndexer(tx)
		now := d.Now().UnixMilli()
		accounted := map[string]int64{}
		var added []string
		skipped, history := 0, 0
		// Duplicates first (reads only): the keys of the parked entries to
		// add are decided before any row is written or locked, as a
		// parking does (catalogdb.HoldParkedKeys).
		var fresh []*ExportLine
		var parked []*catalogdb.Entry
		for _, l := range batch {
			queue := lineQueue(l, p.Queue)
			dup, err := importDuplicate(ctx, tx, l, queue)
			if err != nil {
				return err
			}
			if dup {
				skipped++
				continue
			}
			fresh = append(fresh, l)
			if l.State == StateParked && l.HoldKey != "" {
				e := &catalogdb.Entry{Queue: queue, EventID: l.EventID, State: StateParked, HoldKey: l.HoldKey}
				if len(l.Headers) > 0 {
					// Only the hold mode is read; headers that do not parse
					// leave it to the default ("park").
					e.Headers, _ = transport.UnmarshalHeaders(l.Headers)
				}
				parked = append(parked, e)
			}
		}
		if err := catalogdb.HoldImportedKeys(ctx, tx, parked, d.Now()); err != nil {
			return err
		}
		for _, l := range fresh {
			queue := lineQueue(l, p.Queue)
			// Removed data keeps its sizes; data present has them NULL
			// (its LENGTH is the size), as the catalog stores them.
			var bodySize, headersSize any
			if l.Body == nil && l.Headers == nil {
				bodySize, headersSize = l.BodySize, l.HeadersSize
			}
			var id int64
			err := tx.QueryRowContext(ctx, importSQL, queue, l.EventID, l.Key, l.Type, nullBytes(l.Body), nullBytes(l.Headers), l.BodySHA256,
				l.Reason, l.ErrorType, l.ErrorMessage, l.Fingerprint, l.ConsumerVersion, l.Source, l.DeliveryCount, l.RetryCount,
				l.RedriveCount, string(l.State), l.DeadLetteredAt.UnixMilli(), l.UpdatedAt.UnixMilli(), catalogdb.NullString(l.DLKey), l.HoldKey,
				l.SourceCoords, l.Duplicates, nullTime(l.DecidedAt), l.DecidedBy, l.Decision, nullTime(l.ErasedAt), bodySize, headersSize).Scan(&id)
			if errors.Is(err, sql.ErrNoRows) { // its dl_key came meanwhile by another way (an ingest)
				skipped++
				continue
			}
			if err != nil {
				return fmt.Errorf("catalog: import entry %s: %w", l.EventID, err)
			}
			if l.Body != nil {
				if err := x.Index(ctx, id, l.ErrorMessage, l.Body); err != nil {
					return err
				}
			}
			for _, v := range l.Versions {
				if _, err := tx.ExecContext(ctx, `INSERT INTO lily_dlq_versions(entry_id, version, body, body_sha256, body_size, prev_sha256, edited_by, edited_at, reason, op, erased_at)
					VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, id, v.Version, nullBytes(v.Body), v.BodySHA256, v.BodySize, v.PrevSHA256,
					v.EditedBy, v.EditedAt.UnixMilli(), v.Reason, v.Op, nullTime(v.ErasedAt)); err != nil {
					return fmt.Errorf("catalog: import version %d of entry %s: %w", v.Version, l.EventID, err)
				}
			}
			if tr := l.Triage; tr != nil {
				if _, err := tx.ExecContext(ctx, `INSERT INTO lily_triage_entries(entry_id, assignee, status, ticket, updated_at, updated_by) VALUES (?, ?, ?, ?, ?, ?)`,
					id, tr.Assignee, tr.Status, tr.Ticket, tr.UpdatedAt.UnixMilli(), tr.UpdatedBy); err != nil {
					return fmt.Errorf("catalog: import the triage of entry %s: %w", l.EventID, err)
				}
				for _, n := range tr.Notes {
					if _, err := tx.ExecContext(ctx, `INSERT INTO lily_triage_notes(entry_id, queue, fingerprint, at, author, note) VALUES (?, ?, ?, ?, ?, ?)`,
						id, queue, l.Fingerprint, n.At.UnixMilli(), n.Author, n.Note); err != nil {
						return fmt.Errorf("catalog: import a triage note of entry %s: %w", l.EventID, err)
					}
				}
			}
			if importAccounted(l.State) {
				n, err := importAccept(ctx, tx, queue, l, now)
				if err != nil {
					return err
				}
				accounted[queue] += n
			}
			added = append(added, l.EventID)
			for _, h := range l.History {
				n, err := importHistory(ctx, tx, h)
				if err != nil {
					return err
				}
				history += n
			}
		}
		detail := ""
		if skipped > 0 {
			detail = fmt.Sprintf("%d duplicate(s) skipped", skipped)
		}
		outcome := OutcomeImported
		if len(added) == 0 {
			outcome = OutcomeDuplicate
		}
		for queue, n := range accounted {
			if err := catalogdb.AddCounts(ctx, tx, queue, n, 0); err != nil {
				return err
			}
			out.Accounted += n
		}
		if err := catalogdb.AppendAudit(ctx, tx, d.Record(ActionImport, outcome, false, added, detail)); err != nil {
			return err
		}
		out.Added += len(added)
		out.Skipped += skipped
		out.History += history
		return nil
	})
}

// importAccounted reports whether an imported entry of state st is in a
// bucket of the ledger (dead-lettered: pending, parked, needs_manual;
// discarded: discarded, erased), so that its message must be accepted on
// its queue for the queue to balance. A redriven entry is in none: its
// message went back to its queue in the catalog it came from.
func importAccounted(st State) bool {
	switch st {
	case StatePending, StateParked, StateNeedsManual, StateDiscarded, StateErased:
		return true
	}
	return false
}

// importAccept counts the message of an imported entry as accepted on
// queue in the ledger, in the import's transaction, under the key package
// ledger gives it (ledger.Key: the event ID and the first 16 bytes of the
// body's SHA-256, which body_sha256 holds even once the body is removed):
// so that export → import into a new catalog balances, and a redrive of
// the entry, consumed here, is not accepted a second time. A message the
// ledger counted already is not counted again. It returns 1 when counted.
func importAccept(ctx context.Context, tx *catalogdb.Tx, queue string, l *ExportLine, now int64) (int64, error) {
	if len(l.BodySHA256) < 32 {
		return 0, fmt.Errorf("catalog: import entry %s: body_sha256 %q is not a SHA-256", l.EventID, l.BodySHA256)
	}
	key := l.EventID + "\x1f" + l.BodySHA256[:32]
	res, err := tx.ExecContext(ctx, `INSERT INTO lily_ledger_events(queue, kind, event_id, at)
		SELECT CAST(? AS TEXT), 'accepted', CAST(? AS TEXT), CAST(? AS BIGINT)
		WHERE NOT EXISTS (SELECT 1 FROM lily_ledger_events WHERE queue = ? AND kind IN ('accepted', 'acked') AND event_id IN (?, ?))
		ON CONFLICT DO NOTHING`, queue, key, now, queue, key, l.EventID)
	if err != nil {
		return 0, fmt.Errorf("catalog: import: count entry %s in the ledger: %w", l.EventID, err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// importDuplicate reports whether the catalog holds l's dead-lettering.
func importDuplicate(ctx context.Context, tx *catalogdb.Tx, l *ExportLine, queue string) (bool, error) {
	var one int
	var err error
	if l.DLKey != "" {
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM lily_dlq_entries WHERE dl_key = ?`, l.DLKey).Scan(&one)
	} else {
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM lily_dlq_entries WHERE event_id = ? AND queue = ? AND body_sha256 = ?
			AND source = ? AND source_coords = ? AND dead_lettered_at = ? LIMIT 1`,
			l.EventID, queue, l.BodySHA256, l.Source, l.SourceCoords, l.DeadLetteredAt.UnixMilli()).Scan(&one)
	}
	if err == nil {
		return true, nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return false, fmt.Errorf("catalog: import: check duplicate of %s: %w", l.EventID, err)
}

// importHistory appends one history record unless it is there already;
// it returns 1 when it was appended.
func importHistory(ctx context.Context, tx *catalogdb.Tx, h *AuditRecord) (int, error) {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM lily_audit WHERE at = ? AND op = ? AND actor = ? AND action = ? AND selector = ? AND outcome = ? LIMIT 1`,
		h.At.UnixMilli(), h.Op, h.Actor, h.Action, h.Selector, h.Outcome).Scan(&one)
	if err == nil {
		return 0, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("catalog: import: history: %w", err)
	}
	r := *h
	r.ID = 0
	if err := catalogdb.AppendAudit(ctx, tx, &r); err != nil {
		return 0, err
	}
	return 1, nil
}
