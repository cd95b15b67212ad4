package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/ledger"
	"github.com/lily-mq/lily/transport/sqlite"
)

// dlqEnv is what a 'lily dlq' command works on: the catalog — in the
// SQLite file (--db or the config's db) with the store's transport on the
// same file, or in PostgreSQL (--catalog or catalog_url; sq is nil) — and
// the configuration when --config is given. path names the catalog.
type dlqEnv struct {
	sf     storeFlags
	path   string
	cfg    config.Config
	hasCfg bool
	sq     *sqlite.Transport
	cat    *catalog.Store
	// ledger is cat's, with the configuration's ledger_horizon_hours.
	ledger *ledger.Ledger
	// opened is the store openDLQ opened, closed by Close, when cat is a
	// traced view of it (traceWrites).
	opened *catalog.Store
	// tp traces cat's writes and the decisions made beside them (an
	// unpark); nil without the OTEL_* variables.
	tp trace.TracerProvider
}

// openDLQ opens the existing database of sf and its configuration.
func openDLQ(ctx context.Context, sf storeFlags) (*dlqEnv, error) {
	e := &dlqEnv{sf: sf}
	if sf.config != "" {
		c, err := sf.loadConfig()
		if err != nil {
			return nil, err
		}
		e.cfg, e.hasCfg = c, true
		if err := useIndexRedactor(c); err != nil { // dlq_search.go
			return nil, err
		}
	}
	where, err := sf.where()
	if err != nil {
		return nil, err
	}
	e.path = where
	if e.sq, e.cat, err = sf.openExisting(ctx); err != nil {
		return nil, err
	}
	e.ledger = ledger.New(e.cat)
	if e.hasCfg {
		if err := e.ledger.SetHorizon(e.cfg.LedgerHorizon()); err != nil {
			closeStore(e.sq, e.cat)
			return nil, err
		}
	}
	return e, nil
}

// Close releases the database.
func (e *dlqEnv) Close() {
	cat := e.cat
	if e.opened != nil {
		cat = e.opened
	}
	closeStore(e.sq, cat)
}

// traceWrites traces the catalog's writes the command named cmd makes —
// ingest, and the operator's decisions — with the OTEL_* environment
// variables (tracerFromEnv); without them nothing changes. stop flushes
// the spans.
func (e *dlqEnv) traceWrites(c *cobra.Command, cmd string) (stop func(), err error) {
	tp, stop, err := tracerFromEnv(c.Context(), cmd, strings.ReplaceAll(cmd, " ", "-"), c.ErrOrStderr())
	if err != nil {
		return nil, err
	}
	e.useTracer(tp)
	return stop, nil
}

// useTracer makes cat a view of the opened store that traces its writes
// with tp (catalog.Store.WithTracerProvider); nil tp: no change.
func (e *dlqEnv) useTracer(tp trace.TracerProvider) {
	if tp == nil {
		return
	}
	e.tp = tp
	if e.opened == nil {
		e.opened = e.cat
	}
	e.cat = e.opened.WithTracerProvider(tp)
}

// queue returns a queue's configuration: the config's [[queue]], or the
// defaults.
func (e *dlqEnv) queue(name string) (lily.QueueConfig, bool) {
	if e.hasCfg {
		if q, ok := e.cfg.Queue(name); ok {
			return q, true
		}
	}
	return lily.QueueConfig{Name: name}.WithDefaults(), false
}

// retention is a queue's dlq_retention_hours.
func (e *dlqEnv) retention(name string) time.Duration {
	q, _ := e.queue(name)
	return time.Duration(q.Settings().DLQRetentionHours) * time.Hour
}

// maxRedrives is a queue's max_redrives.
func (e *dlqEnv) maxRedrives(name string) int {
	q, _ := e.queue(name)
	return q.Settings().MaxRedrives
}

// selectFlags are the filters shared by the commands that select entries.
type selectFlags struct {
	queue, reason, errorType, fingerprint string
	consumerVersion, source, key, msgType string
	olderThan, newerThan, ids, eventIDs   string
	states                                string
	schemaVersion                         string
	where                                 string
	redriveCount                          int
	limit                                 int
	withStates, withLimit                 bool
	// reasonFlag names the dead-letter reason filter: "reason", except
	// for discard, whose --reason is the decision's reason.
	reasonFlag string
}

// add registers the filter flags on cmd.
func (s *selectFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&s.queue, "queue", "", "only entries of this source queue")
	if s.reasonFlag == "" {
		s.reasonFlag = "reason"
	}
	fl.StringVar(&s.reason, s.reasonFlag, "", "only this dead-letter reason (permanent, retries_exhausted, delivery_limit, ...)")
	fl.StringVar(&s.errorType, "error-type", "", `only this Go error type, e.g. "*json.SyntaxError"`)
	fl.StringVar(&s.fingerprint, "fingerprint", "", "only this error message fingerprint (as 'lily dlq group --by fingerprint' prints it)")
	fl.StringVar(&s.consumerVersion, "consumer-version", "", "only entries dead-lettered by this consumer version")
	fl.StringVar(&s.source, "source", "", "only entries that failed at this source (x-lily-source)")
	fl.StringVar(&s.key, "key", "", "only messages with this key")
	fl.StringVar(&s.msgType, "type", "", "only messages of this type")
	fl.StringVar(&s.olderThan, "older-than", "", "only entries dead-lettered longer ago than this (e.g. 90m, 12h, 7d)")
	fl.StringVar(&s.newerThan, "newer-than", "", "only entries dead-lettered within this (e.g. 30m, 2d)")
	fl.StringVar(&s.ids, "ids", "", "only these catalog entry IDs, comma-separated")
	fl.StringVar(&s.eventIDs, "event-ids", "", "only these event IDs, comma-separated")
	fl.IntVar(&s.redriveCount, "redrive-count", -1, "only entries whose message had been redriven exactly this many times")
	fl.StringVar(&s.schemaVersion, "schema-version", "", "only entries of this message schema version (x-lily-schema-version), or 'none' for entries without one")
	addWhereFlag(cmd, &s.where)
	if s.withStates {
		fl.StringVar(&s.states, "state", "held", "entry states, comma-separated: pending, parked, needs_manual, redriven, discarded, erased; 'held' (the first three) or 'all'")
	}
	if s.withLimit {
		fl.IntVar(&s.limit, "limit", 0, "at most this many entries (0: all that match)")
	}
}

// filter builds the catalog filter, reporting every bad value at once as
// a usage error that names the flag.
func (s *selectFlags) filter(now time.Time) (catalog.Filter, error) {
	f := catalog.Filter{Queue: s.queue, Reason: s.reason, ErrorType: s.errorType, Fingerprint: s.fingerprint,
		ConsumerVersion: s.consumerVersion, Source: s.source, Key: s.key, Type: s.msgType}
	var problems []string
	if s.olderThan != "" {
		if d, err := parseAge(s.olderThan); err != nil {
			problems = append(problems, "--older-than "+err.Error())
		} else {
			f.DeadLetteredBefore = now.Add(-d)
		}
	}
	if s.newerThan != "" {
		if d, err := parseAge(s.newerThan); err != nil {
			problems = append(problems, "--newer-than "+err.Error())
		} else {
			f.DeadLetteredAfter = now.Add(-d)
		}
	}
	if s.ids != "" {
		ids, err := parseIDs(s.ids)
		if err != nil {
			problems = append(problems, "--ids: "+err.Error())
		}
		f.IDs = ids
	}
	if s.eventIDs != "" {
		for _, id := range strings.Split(s.eventIDs, ",") {
			if id = strings.TrimSpace(id); id == "" {
				problems = append(problems, fmt.Sprintf("--event-ids %q: empty event ID in the list", s.eventIDs))
				break
			}
			f.EventIDs = append(f.EventIDs, id)
		}
	}
	if s.redriveCount < -1 {
		problems = append(problems, fmt.Sprintf("--redrive-count %d: must be >= 0", s.redriveCount))
	} else if s.redriveCount >= 0 {
		n := s.redriveCount
		f.RedriveCount = &n
	}
	if s.schemaVersion != "" {
		v, err := parseSchemaVersion(s.schemaVersion)
		if err != nil {
			problems = append(problems, err.Error())
		}
		f.SchemaVersion = &v
	}
	if s.withStates {
		states, err := parseStates(s.states)
		if err != nil {
			problems = append(problems, err.Error())
		}
		f.States = states
	}
	if s.where != "" {
		w, err := parseWhereFlag(s.where)
		if err != nil {
			problems = append(problems, err.Error())
		}
		f.Where = w
	}
	if s.limit < 0 {
		problems = append(problems, fmt.Sprintf("--limit %d: must be >= 0 (0: no limit)", s.limit))
	}
	if len(problems) > 0 {
		return f, usagef("%s", strings.Join(problems, "; "))
	}
	return f, nil
}

// parseAge reads a Go duration or a number of days ("7d").
func parseAge(s string) (time.Duration, error) { return catalog.ParseAge(s) }

// parseIDs reads comma-separated catalog entry IDs.
func parseIDs(s string) ([]int64, error) {
	var out []int64
	for _, part := range strings.Split(s, ",") {
		id, err := parseID(strings.TrimSpace(part))
		if err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, nil
}

// parseID reads one catalog entry ID: a positive integer.
func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%q is not an entry ID: entry IDs are positive integers, as 'lily dlq peek' and 'lily dlq group' print them", s)
	}
	return id, nil
}

// parseStates reads --state.
func parseStates(s string) ([]catalog.State, error) {
	switch s {
	case "", "held":
		return catalog.HeldStates, nil
	case "all":
		return nil, nil
	}
	var out []catalog.State
	for _, part := range strings.Split(s, ",") {
		st := catalog.State(strings.TrimSpace(part))
		if !st.Valid() {
			return nil, fmt.Errorf("--state %q: %q is not a state (pending, parked, needs_manual, redriven, discarded, erased, held or all)", s, part)
		}
		out = append(out, st)
	}
	return out, nil
}

// actorFlag is --actor: who decides, recorded in the audit log.
func actorFlag(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, "actor", "", "who decides, for the audit log (default: the OS user)")
}

func actorOr(a string) string {
	if a == "" {
		return catalog.DefaultActor()
	}
	return a
}

// jsonStream writes one JSON object whose array member is streamed, so
// that a listing of a million entries is never held in memory.
type jsonStream struct {
	w     io.Writer
	n     int
	err   error
	array string
}

// begin writes the object's opening and the array's name.
func (j *jsonStream) begin(w io.Writer, array string) {
	j.w, j.array = w, array
	_, j.err = fmt.Fprintf(w, "{\n  %q: [", array)
}

// item writes one element of the array.
func (j *jsonStream) item(v any) {
	if j.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		j.err = err
		return
	}
	sep := "\n    "
	if j.n > 0 {
		sep = ",\n    "
	}
	j.n++
	_, j.err = fmt.Fprintf(j.w, "%s%s", sep, b)
}

// end closes the array and writes the members of rest (a struct or map
// that marshals to an object) after it.
func (j *jsonStream) end(rest any) error {
	if j.err != nil {
		return j.err
	}
	closing := "]"
	if j.n > 0 {
		closing = "\n  ]"
	}
	b, err := json.MarshalIndent(rest, "", "  ")
	if err != nil {
		return err
	}
	members := strings.TrimSpace(string(b))
	members = strings.TrimSuffix(strings.TrimPrefix(members, "{"), "}")
	members = strings.TrimRight(members, " \n")
	if strings.TrimSpace(members) == "" {
		_, err = fmt.Fprintf(j.w, "%s\n}\n", closing)
	} else {
		_, err = fmt.Fprintf(j.w, "%s,%s\n}\n", closing, members)
	}
	return err
}
