package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracerFromEnv returns the TracerProvider the standard OTEL_*
// environment variables describe, for the runtime's spans, and the
// function that flushes and stops it. Tracing is off (nil) unless an OTLP
// endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or OTEL_TRACES_EXPORTER=otlp, and
// off with OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. The
// exporter is OTLP over HTTP/protobuf; it reads the endpoint, headers,
// timeout, compression and certificates itself, the SDK reads
// OTEL_TRACES_SAMPLER(_ARG) and OTEL_BSP_*, and the resource takes
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (service.name defaults to
// service).
func tracerFromEnv(ctx context.Context, cmd, service string, stderr io.Writer) (trace.TracerProvider, func(), error) {
	off := func() {}
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, off, nil
	}
	endpoint := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	switch exp := os.Getenv("OTEL_TRACES_EXPORTER"); exp {
	case "none":
		return nil, off, nil
	case "":
		if endpoint == "" {
			return nil, off, nil
		}
	case "otlp":
	default:
		return nil, nil, fmt.Errorf("%s: OTEL_TRACES_EXPORTER=%q: lily exports traces with otlp only (set otlp or none)", cmd, exp)
	}
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return nil, nil, fmt.Errorf("%s: OTEL_EXPORTER_OTLP_PROTOCOL=%q: lily sends OTLP over http/protobuf only (unset it, or point the endpoint at the collector's HTTP port, usually 4318)", cmd, proto)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: the OTLP trace exporter from OTEL_EXPORTER_OTLP_*: %w", cmd, err)
	}
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", service)), resource.Environment())
	if err != nil {
		return nil, nil, fmt.Errorf("%s: OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %w", cmd, err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	if endpoint == "" {
		endpoint = "the default http://localhost:4318"
	}
	fmt.Fprintf(stderr, "%s: traces to OTLP %s\n", cmd, endpoint)
	return tp, func() {
		// Flush what the batcher holds: the last spans of a stopping
		// process are often the interesting ones.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			fmt.Fprintf(stderr, "%s: flush traces: %v\n", cmd, err)
		}
	}, nil
}
