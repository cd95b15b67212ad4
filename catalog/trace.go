package catalog

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/catalogdb"
	"github.com/lily-mq/lily/transport"
)

// TracerName is the instrumentation scope of the catalog's spans.
const TracerName = "github.com/lily-mq/lily/catalog"

// Attributes of the catalog's spans besides the database and messaging
// semantic conventions (db.system.name, db.collection.name,
// db.operation.name, messaging.destination.name, messaging.message.id).
const (
	// AttrDecision is the operator's decision: discard, erase, edit,
	// triage (the audit log's action).
	AttrDecision = attribute.Key("lily.decision")
	// AttrActor is who decided (the audit log's actor).
	AttrActor = attribute.Key("lily.actor")
	// AttrOp is the operation ID the audit log records the decision under.
	AttrOp = attribute.Key("lily.op")
	// AttrEntryID is the catalog entry's ID.
	AttrEntryID = attribute.Key("lily.catalog.entry_id")
	// AttrAdded is false when an ingested dead letter was in the catalog
	// already (ingested before a crash).
	AttrAdded = attribute.Key("lily.catalog.added")
	// AttrOutcome is the decision's outcome (the audit log's).
	AttrOutcome = attribute.Key("lily.outcome")
	// AttrDryRun marks a decision that changed nothing.
	AttrDryRun = attribute.Key("lily.dry_run")
	// AttrReason is the dead letter's reason.
	AttrReason = attribute.Key("lily.dead_letter.reason")
	// AttrFingerprint is the error fingerprint of a group's triage.
	AttrFingerprint = attribute.Key("lily.triage.fingerprint")
)

// entriesTable is the db.collection.name of the catalog's entries.
const entriesTable = "lily_dlq_entries"

// WithTracerProvider returns a view of s that traces its writes with tp:
// each dead letter ingested is a span ("ingest <queue>") in the message's
// own trace, a child of its traceparent; each entry an operator decides
// about (Discard, Erase, Edit, TriageEntries) is a span ("<decision>
// <queue>") in the caller's context — the API request, the command —
// linked to the message's trace from its stored traceparent, with the
// decision, the actor and the operation ID. The view shares s's database;
// closing it does not close s. A nil tp, or s itself, traces nothing.
func (s *Store) WithTracerProvider(tp trace.TracerProvider) *Store {
	c := *s
	c.owned = false
	c.tracer = nil
	if tp != nil {
		c.tracer = tp.Tracer(TracerName)
	}
	return &c
}

// MessageTraceContext returns ctx with the remote span context of the
// W3C trace context in h (traceparent, tracestate), read as text: a
// string or the []byte another producer's client sends.
func MessageTraceContext(ctx context.Context, h transport.Headers) context.Context {
	in := propagation.MapCarrier{}
	for _, k := range []string{evidence.HeaderTraceparent, "tracestate"} {
		if v, ok := evidence.Text(h[k]); ok {
			in[k] = v
		}
	}
	return propagation.TraceContext{}.Extract(ctx, in)
}

// messageSpan is the span context of the trace context in h; invalid
// when h has none. It never falls back on a caller's span.
func messageSpan(h transport.Headers) trace.SpanContext {
	return trace.SpanContextFromContext(MessageTraceContext(context.Background(), h))
}

// writeSpan is one span of a catalog write, made once the write's
// outcome is known: the spans of a transaction that is retried are made
// once, for the attempt that counted, and none is ever left open.
type writeSpan struct {
	name string
	kind trace.SpanKind
	// msg is the message's trace context: the span's parent (ingest) or a
	// link from a span in the caller's context (a decision).
	msg      trace.SpanContext
	asParent bool
	// table is the db.collection.name written; "" is the entries'.
	table string
	attrs []attribute.KeyValue
}

// emitSpans records ws, started at start and ending now, with err (nil:
// committed).
func (s *Store) emitSpans(ctx context.Context, start time.Time, ws []writeSpan, err error) {
	for _, w := range ws {
		table := w.table
		if table == "" {
			table = entriesTable
		}
		opts := []trace.SpanStartOption{trace.WithTimestamp(start), trace.WithSpanKind(w.kind), trace.WithAttributes(w.attrs...),
			trace.WithAttributes(attribute.String("db.system.name", s.dbSystem()), attribute.String("db.collection.name", table))}
		parent := ctx
		switch {
		case w.asParent:
			parent = trace.ContextWithRemoteSpanContext(context.Background(), w.msg)
		case w.msg.IsValid():
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: w.msg}))
		}
		_, span := s.tracer.Start(parent, w.name, opts...)
		if err != nil {
			span.SetAttributes(attribute.String("error.type", fmt.Sprintf("%T", err)))
			span.RecordError(err)
			span.SetStatus(codes.Error, "catalog write not committed")
		}
		span.End()
	}
}

// dbSystem is the db.system.name of the store.
func (s *Store) dbSystem() string {
	if s.db.Dialect() == catalogdb.Postgres {
		return "postgresql"
	}
	return "sqlite"
}

// ingestSpans are the spans of one ingested batch: one per dead letter,
// in its own trace; added is known once the batch is committed.
func (s *Store) ingestSpans(queue string, ds []*transport.Delivery, entries []*Entry) []writeSpan {
	ws := make([]writeSpan, len(ds))
	for i, d := range ds {
		ws[i] = writeSpan{name: "ingest " + queue, kind: trace.SpanKindConsumer, asParent: true,
			msg: messageSpan(d.Headers),
			attrs: []attribute.KeyValue{
				attribute.String("messaging.destination.name", queue),
				attribute.String("messaging.operation.type", "process"),
				attribute.String("messaging.operation.name", "ingest"),
				attribute.String("messaging.message.id", d.EventID),
				attribute.String("db.operation.name", "INSERT"),
				AttrReason.String(entries[i].Reason),
				AttrEntryID.Int64(entries[i].ID),
				AttrAdded.Bool(entries[i].ID != 0),
			}}
	}
	return ws
}

// messageTraces returns the stored trace context of each of refs that
// has one, read in tx before a decision removes the headers. Nothing is
// read when s does not trace.
func (s *Store) messageTraces(ctx context.Context, tx *catalogdb.Tx, refs []EntryRef) (map[int64]trace.SpanContext, error) {
	if s.tracer == nil || len(refs) == 0 {
		return nil, nil
	}
	args := make([]any, len(refs))
	for i, r := range refs {
		args[i] = r.ID
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, headers FROM `+entriesTable+` WHERE id IN (`+catalogdb.Placeholders(len(refs))+`) AND headers IS NOT NULL`, args...)
	if err != nil {
		return nil, fmt.Errorf("catalog: read the trace context of %d entries: %w", len(refs), err)
	}
	defer rows.Close()
	out := make(map[int64]trace.SpanContext, len(refs))
	for rows.Next() {
		var id int64
		var raw []byte
		if err := rows.Scan(&id, &raw); err != nil {
			return nil, fmt.Errorf("catalog: read the trace context of %d entries: %w", len(refs), err)
		}
		h, err := transport.UnmarshalHeaders(raw)
		if err != nil {
			continue // headers that do not decode carry no trace context; the span has no link
		}
		if sc := messageSpan(h); sc.IsValid() {
			out[id] = sc
		}
	}
	return out, rows.Err()
}

// decisionSpans are the spans of one decision's batch: one per entry, in
// the caller's context, linked to the message's trace (traces, from
// messageTraces).
func decisionSpans(d catalogdb.Decision, action, outcome string, dryRun bool, refs []EntryRef, traces map[int64]trace.SpanContext) []writeSpan {
	ws := make([]writeSpan, len(refs))
	op := "UPDATE"
	if dryRun {
		op = "SELECT"
	}
	for i, r := range refs {
		ws[i] = writeSpan{name: action + " " + r.Queue, kind: trace.SpanKindInternal, msg: traces[r.ID],
			attrs: []attribute.KeyValue{
				AttrDecision.String(action), AttrActor.String(d.Actor), AttrOp.String(d.Op),
				AttrOutcome.String(outcome), AttrDryRun.Bool(dryRun), AttrEntryID.Int64(r.ID),
				attribute.String("messaging.destination.name", r.Queue),
				attribute.String("messaging.message.id", r.EventID),
				attribute.String("db.operation.name", op),
			}}
	}
	return ws
}

// groupSpan is the span of the triage of a group (queue, fingerprint):
// one span, without a link — the group's record covers messages
// dead-lettered later as well, which no trace holds yet.
func groupSpan(d catalogdb.Decision, queue, fingerprint string) writeSpan {
	return writeSpan{name: ActionTriage + " " + queue, kind: trace.SpanKindInternal, table: "lily_triage_groups",
		attrs: []attribute.KeyValue{
			AttrDecision.String(ActionTriage), AttrActor.String(d.Actor), AttrOp.String(d.Op),
			AttrOutcome.String(OutcomeTriaged), AttrDryRun.Bool(false), AttrFingerprint.String(fingerprint),
			attribute.String("messaging.destination.name", queue),
			attribute.String("db.operation.name", "UPSERT"),
		}}
}
