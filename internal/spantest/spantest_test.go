package spantest

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// TestOpenAndAttr: a span started and not ended is reported open, by name
// and message ID; an ended one is not; Attr reads a span's attribute;
// Named finds the ended spans of one name.
func TestOpenAndAttr(t *testing.T) {
	sr, tp := Recorder(t)
	tr := tp.Tracer("spantest")
	_, done := tr.Start(context.Background(), "done")
	done.End()
	_, open := tr.Start(context.Background(), "open", trace.WithAttributes(attribute.String("messaging.message.id", "m-1")))
	if got, want := Open(sr), []string{"open (m-1)"}; !slices.Equal(got, want) {
		t.Errorf("Open = %v, want %v", got, want)
	}
	open.End()
	if got := Open(sr); len(got) != 0 {
		t.Errorf("Open after End = %v, want none", got)
	}
	if v := Attr(sr.Ended()[1], "messaging.message.id").AsString(); v != "m-1" {
		t.Errorf("Attr = %q, want m-1", v)
	}
	_, again := tr.Start(context.Background(), "done")
	again.End()
	if got := Named(sr, "done"); len(got) != 2 || got[1].SpanContext().SpanID() != again.SpanContext().SpanID() {
		t.Errorf("Named(done) = %d spans, want both, in the order they ended", len(got))
	}
	if got := Named(sr, "never"); len(got) != 0 {
		t.Errorf("Named(never) = %d spans, want none", len(got))
	}
}
