// Package spantest reads the spans of OpenTelemetry's in-memory recorder
// in tests: an attribute's value, and the spans left open.
package spantest

import (
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

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
