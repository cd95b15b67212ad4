// Package spantest records the spans of OpenTelemetry's SDK in memory for
// tests and reads them: an attribute's value, and the spans left open.
package spantest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Recorder returns an in-memory span recorder and a TracerProvider that
// records into it, shut down when the test ends.
func Recorder(t testing.TB) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return sr, tp
}

// Attr returns the value of s's attribute k; the zero value when s has
// none.
func Attr(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// Open returns the names of the spans sr saw start and not end, each with
// its messaging.message.id when it has one: a span left open is a leak
// the exporter never sees.
func Open(sr *tracetest.SpanRecorder) []string {
	var out []string
	for _, s := range sr.Started() {
		if s.EndTime().IsZero() {
			name := s.Name()
			if id := Attr(s, "messaging.message.id").AsString(); id != "" {
				name += " (" + id + ")"
			}
			out = append(out, name)
		}
	}
	return out
}

// Named returns the spans sr saw end that are called name, in the order
// they ended.
func Named(sr *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}
