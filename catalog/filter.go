package catalog

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lily-mq/lily/catalog/where"
	"github.com/lily-mq/lily/internal/catalogdb"
)

// ParseAge reads an age for the older-than and newer-than filters: a
// positive Go duration ("90m", "12h") or a number of days ("7d").
func ParseAge(s string) (time.Duration, error) {
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n float64
		if n, err = strconv.ParseFloat(days, 64); err == nil {
			d = time.Duration(n * float64(24*time.Hour))
		}
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: want a positive duration such as 90m, 12h or 7d", s)
	}
	return d, nil
}

// Filter selects entries. Zero fields select everything; set fields are
// combined with AND.
type Filter struct {
	// Queue is the source queue.
	Queue string
	// States are the entry states; empty means any state.
	States []State
	// Reason is the dead-letter reason, e.g. "permanent".
	Reason string
	// ErrorType is the Go error type, e.g. "*json.SyntaxError".
	ErrorType string
	// Fingerprint is the error message fingerprint (evidence.Fingerprint).
	Fingerprint string
	// ConsumerVersion is the failing consumer's build version.
	ConsumerVersion string
	// Source is where the message failed (x-lily-source).
	Source string
	// Key is the message key (a data subject, an ordering key).
	Key string
	// Type is the message type.
	Type string
	// IDs are catalog entry IDs.
	IDs []int64
	// EventIDs are event IDs.
	EventIDs []string
	// DeadLetteredBefore selects entries dead-lettered strictly before it
	// (--older-than); zero means no bound.
	DeadLetteredBefore time.Time
	// DeadLetteredAfter selects entries dead-lettered at or after it
	// (--newer-than); zero means no bound.
	DeadLetteredAfter time.Time
	// RedriveCount, when not nil, selects entries redriven exactly that
	// many times before they were dead-lettered.
	RedriveCount *int
	// SchemaVersion, when not nil, selects entries of that message schema
	// version (x-lily-schema-version); 0 selects entries without one.
	SchemaVersion *int
	// AfterID selects entries with an ID above it (keyset paging).
	AfterID int64
	// Where, when set, selects JSON bodies whose fields satisfy it
	// (where.Parse, docs/where.md); bodies that are not JSON never match.
	Where *where.Expr
}

// HeldStates are the states of entries still in the work list: they count
// as dead-lettered in the ledger and are subject to retention.
var HeldStates = []State{StatePending, StateParked, StateNeedsManual}

// init lends the packages layered on the store (redrive, rules) the SQL
// of a Filter, for their own statements on the store's entries.
func init() {
	catalogdb.LendSelection(func(filter any, d catalogdb.Dialect) catalogdb.Selection {
		f := filter.(Filter)
		where, args := f.where()
		return catalogdb.Selection{From: f.table(d), Where: where, Args: args}
	})
}

// where returns f's WHERE clause (" WHERE …", or "" for every entry)
// and the arguments of its placeholders.
func (f Filter) where() (string, []any) {
	var conds []string
	var args []any
	eq := func(col, v string) {
		if v != "" {
			conds = append(conds, col+" = ?")
			args = append(args, v)
		}
	}
	eq("queue", f.Queue)
	if len(f.States) > 0 {
		conds = append(conds, f.stateCond(&args)...)
	}
	eq("reason", f.Reason)
	eq("error_type", f.ErrorType)
	eq("fingerprint", f.Fingerprint)
	eq("consumer_version", f.ConsumerVersion)
	eq("source", f.Source)
	eq("msg_key", f.Key)
	eq("msg_type", f.Type)
	if len(f.IDs) > 0 {
		conds = append(conds, "id IN ("+catalogdb.Placeholders(len(f.IDs))+")")
		for _, id := range f.IDs {
			args = append(args, id)
		}
	}
	if len(f.EventIDs) > 0 {
		conds = append(conds, "event_id IN ("+catalogdb.Placeholders(len(f.EventIDs))+")")
		for _, id := range f.EventIDs {
			args = append(args, id)
		}
	}
	if !f.DeadLetteredBefore.IsZero() {
		conds = append(conds, "dead_lettered_at < ?")
		args = append(args, f.DeadLetteredBefore.UnixMilli())
	}
	if !f.DeadLetteredAfter.IsZero() {
		conds = append(conds, "dead_lettered_at >= ?")
		args = append(args, f.DeadLetteredAfter.UnixMilli())
	}
	if f.RedriveCount != nil {
		conds = append(conds, "redrive_count = ?")
		args = append(args, *f.RedriveCount)
	}
	f.schemaVersionCond(&conds, &args)
	if f.Where != nil {
		conds = append(conds, f.Where.SQL(&args))
	}
	if f.AfterID > 0 {
		conds = append(conds, "id > ?")
		args = append(args, f.AfterID)
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// allHeld reports whether every state of f is held (and f has some).
func (f Filter) allHeld() bool {
	for _, st := range f.States {
		if !st.IsHeld() {
			return false
		}
	}
	return len(f.States) > 0
}

// stateCond returns the state conditions of f. Known states are written as
// literals, and a selection of held states also carries catalogdb.HeldCond, so that
// the partial indexes over held entries serve it.
func (f Filter) stateCond(args *[]any) []string {
	ph := make([]string, len(f.States))
	for i, st := range f.States {
		if st.Valid() {
			ph[i] = "'" + string(st) + "'"
		} else {
			ph[i] = "?"
			*args = append(*args, string(st))
		}
	}
	cond := "state IN (" + strings.Join(ph, ", ") + ")"
	if !f.allHeld() || cond == catalogdb.HeldCond {
		return []string{cond}
	}
	return []string{catalogdb.HeldCond, cond}
}

// table is the FROM clause for paging through f in ID order: a selective
// lookup (IDs, event IDs, key) lets the planner choose; otherwise, for one
// state, an index that yields the IDs in order, so that each page reads on
// from the last instead of sorting every match again.
func (f Filter) table(d catalogdb.Dialect) string {
	switch {
	case d != catalogdb.SQLite:
		return "lily_dlq_entries" // PostgreSQL's planner picks its index
	case len(f.IDs) > 0 || len(f.EventIDs) > 0 || f.Key != "" || len(f.States) != 1:
		return "lily_dlq_entries"
	case f.Queue != "":
		return "lily_dlq_entries INDEXED BY lily_dlq_entries_queue_state"
	default:
		return "lily_dlq_entries INDEXED BY lily_dlq_entries_state_id"
	}
}

// perState splits f into one filter per state (f itself when it has none),
// for paging in ID order with table's index.
func (f Filter) perState() []Filter {
	if len(f.States) <= 1 {
		return []Filter{f}
	}
	out := make([]Filter, len(f.States))
	for i, st := range f.States {
		out[i] = f
		out[i].States = []State{st}
	}
	return out
}

// filterJSON is the audit form of a Filter: only the fields that are set.
type filterJSON struct {
	Queue           string   `json:"queue,omitempty"`
	States          []State  `json:"states,omitempty"`
	Reason          string   `json:"reason,omitempty"`
	ErrorType       string   `json:"error_type,omitempty"`
	Fingerprint     string   `json:"fingerprint,omitempty"`
	ConsumerVersion string   `json:"consumer_version,omitempty"`
	Source          string   `json:"source,omitempty"`
	Key             string   `json:"key,omitempty"`
	Type            string   `json:"type,omitempty"`
	IDs             []int64  `json:"ids,omitempty"`
	EventIDs        []string `json:"event_ids,omitempty"`
	Before          string   `json:"dead_lettered_before,omitempty"`
	After           string   `json:"dead_lettered_after,omitempty"`
	RedriveCount    *int     `json:"redrive_count,omitempty"`
	SchemaVersion   *int     `json:"schema_version,omitempty"`
	Where           string   `json:"where,omitempty"`
}

// String describes f as compact JSON with only the fields that are set,
// e.g. {"queue":"orders.created","reason":"permanent"}; the audit log
// records it as the selector of a decision.
func (f Filter) String() string {
	j := filterJSON{Queue: f.Queue, States: f.States, Reason: f.Reason, ErrorType: f.ErrorType,
		Fingerprint: f.Fingerprint, ConsumerVersion: f.ConsumerVersion, Source: f.Source, Key: f.Key,
		Type: f.Type, IDs: f.IDs, EventIDs: f.EventIDs, RedriveCount: f.RedriveCount, SchemaVersion: f.SchemaVersion, Where: f.Where.String()}
	if !f.DeadLetteredBefore.IsZero() {
		j.Before = f.DeadLetteredBefore.UTC().Format(time.RFC3339Nano)
	}
	if !f.DeadLetteredAfter.IsZero() {
		j.After = f.DeadLetteredAfter.UTC().Format(time.RFC3339Nano)
	}
	b, _ := json.Marshal(j)
	return string(b)
}

// ParseFilter reads Filter.String's JSON back: a redrive job keeps its
// selection so.
func ParseFilter(s string) (Filter, error) {
	var j filterJSON
	if err := json.Unmarshal([]byte(s), &j); err != nil {
		return Filter{}, err
	}
	f := Filter{Queue: j.Queue, States: j.States, Reason: j.Reason, ErrorType: j.ErrorType, Fingerprint: j.Fingerprint,
		ConsumerVersion: j.ConsumerVersion, Source: j.Source, Key: j.Key, Type: j.Type, IDs: j.IDs, EventIDs: j.EventIDs,
		RedriveCount: j.RedriveCount, SchemaVersion: j.SchemaVersion}
	var err error
	if j.Where != "" { // a job's --where (where.go)
		if f.Where, err = where.Parse(j.Where); err != nil {
			return Filter{}, err
		}
	}
	if j.Before != "" {
		if f.DeadLetteredBefore, err = time.Parse(time.RFC3339Nano, j.Before); err != nil {
			return Filter{}, err
		}
	}
	if j.After != "" {
		if f.DeadLetteredAfter, err = time.Parse(time.RFC3339Nano, j.After); err != nil {
			return Filter{}, err
		}
	}
	return f, nil
}
