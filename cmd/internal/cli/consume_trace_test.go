package cli

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/cmd/internal/demo"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/internal/waittest"
	"github.com/lily-mq/lily/transport"
)

// otlpReceiver is an OTLP/HTTP trace endpoint: it keeps the spans it is
// sent, with their resource's service.name.
type otlpReceiver struct {
	mu    sync.Mutex
	spans []*tracepb.Span
	names []string // service.name per span
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if r.URL.Path != "/v1/traces" || err != nil {
		http.Error(w, fmt.Sprintf("%s: %v", r.URL.Path, err), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				o.spans = append(o.spans, s)
				o.names = append(o.names, service)
			}
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// startOTLPReceiver starts an OTLP receiver and points the OTEL_*
// variables of the test at it, with OTEL_SERVICE_NAME service.
func startOTLPReceiver(t *testing.T, service string) *otlpReceiver {
	t.Helper()
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	t.Cleanup(collector.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_SERVICE_NAME", service)
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_SDK_DISABLED", "")
	return recv
}

// spanAttr returns a string or int attribute of s as text.
func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			if v := kv.GetValue().GetStringValue(); v != "" {
				return v
			}
			return fmt.Sprint(kv.GetValue().GetIntValue())
		}
	}
	return ""
}

// TestConsumeExportsTracesFromEnv runs 'lily consume' with the standard
// OTEL_* variables pointing at an OTLP/HTTP receiver: a message published
// with a traceparent fails once and is acked; both handler attempts are
// exported as children of that traceparent, under OTEL_SERVICE_NAME, and
// the endpoint receives each attempt's span as its traceparent header.
func TestConsumeExportsTracesFromEnv(t *testing.T) {
	recv := startOTLPReceiver(t, "checkout-sidecar")

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	var mu sync.Mutex
	var seen []string // traceparent headers the endpoint received
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("traceparent"))
		n := len(seen)
		mu.Unlock()
		if n == 1 {
			http.Error(w, "payment gateway: timeout", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(endpoint.Close)

	db := filepath.Join(t.TempDir(), "lily.db")
	queue := fmt.Sprintf("traced%08x.created", rand.Uint32())
	cfg := sidecarConfig(t, lily.TransportSQLite, "", "", db, queue)
	pub := openSidecarQueue(t, lily.TransportSQLite, "", db, demo.QueueConfig(queue, lily.TransportSQLite, ""))
	if err := lily.Publish(context.Background(), pub, queue, []lily.Message{{EventID: "o-1", Body: []byte(`{}`),
		Headers: lily.Headers{"traceparent": "00-" + traceID + "-" + parentID + "-01"}}}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "consume", "--config", cfg, "--queue", queue, "--http", endpoint.URL, "--exit-when-idle", "300ms", "--json")
	if code != 0 {
		t.Fatalf("consume exit %d\n%s\n%s", code, out, errOut)
	}
	var sum consumeJSON
	if err := json.Unmarshal([]byte(out), &sum); err != nil || sum.Acked != 1 || sum.Retried != 1 || sum.DeadLettered != 0 {
		t.Fatalf("consume: %+v %v, want 1 retried then acked", sum, err)
	}

	// consume flushed its spans before exiting.
	recv.mu.Lock()
	defer recv.mu.Unlock()
	var attempts []*tracepb.Span
	for i, s := range recv.spans {
		if s.Name == "process "+queue {
			attempts = append(attempts, s)
			if recv.names[i] != "checkout-sidecar" {
				t.Errorf("span exported under service.name %q, want OTEL_SERVICE_NAME", recv.names[i])
			}
		}
	}
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans exported, want 2 (stderr: %s)", len(attempts), errOut)
	}
	slices.SortFunc(attempts, func(a, b *tracepb.Span) int { return int(a.StartTimeUnixNano - b.StartTimeUnixNano) })
	for i, s := range attempts {
		if hex.EncodeToString(s.TraceId) != traceID || hex.EncodeToString(s.ParentSpanId) != parentID {
			t.Errorf("attempt %d: trace %x parent %x, want %s under %s", i+1, s.TraceId, s.ParentSpanId, traceID, parentID)
		}
		if s.Kind != tracepb.Span_SPAN_KIND_CONSUMER || spanAttr(s, "messaging.destination.name") != queue || spanAttr(s, "messaging.message.id") != "o-1" {
			t.Errorf("attempt %d: kind %v, attributes %v", i+1, s.Kind, s.Attributes)
		}
		if want := "00-" + traceID + "-" + hex.EncodeToString(s.SpanId) + "-01"; i < len(seen) && seen[i] != want {
			t.Errorf("call %d: the endpoint got traceparent %q, want its attempt's span %q", i+1, seen[i], want)
		}
	}
	if o1, o2 := spanAttr(attempts[0], "lily.outcome"), spanAttr(attempts[1], "lily.outcome"); o1 != "retried" || o2 != "acked" {
		t.Errorf("outcomes %q, %q; want retried, acked", o1, o2)
	}
	if rc := spanAttr(attempts[1], "lily.retry_count"); rc != "1" {
		t.Errorf("the second attempt's lily.retry_count = %q, want 1", rc)
	}
	// Conservation: the one message acked, the ledger balanced.
	code, out, errOut = run(t, "reconcile", "--config", cfg, "--json")
	var rec reconcileJSON
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || !rec.Balanced || len(rec.Queues) != 1 || rec.Queues[0].Acked != 1 || rec.Queues[0].Accepted != 1 {
		t.Errorf("reconcile: exit %d %s %s", code, out, errOut)
	}
}

// TestServeTracesRedriveJobs runs 'lily serve' with the OTEL_* variables
// pointing at an OTLP receiver and redrives two dead letters through the
// API: each redriven message is exported as a "redrive" producer span
// with its outcome, under the service name lily-serve.
func TestServeTracesRedriveJobs(t *testing.T) {
	t.Setenv("LILY_TOKENS", "")
	recv := startOTLPReceiver(t, "")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // export within 50 ms rather than 5 s
	db := seedDLQ(t)
	base := startServe(t, "--db", db, "--listen", "127.0.0.1:0")
	var job struct {
		ID    int64
		State string
	}
	if code := getJSON(t, "POST", base+"/api/redrives", `{"filter":{"reason":"retries_exhausted"}}`, &job); code != http.StatusAccepted {
		t.Fatalf("redrive: %d %+v", code, job)
	}
	waittest.ForState(t, "two redrive spans exported", func() (bool, string) {
		recv.mu.Lock()
		defer recv.mu.Unlock()
		n := 0
		var names []string
		for i, s := range recv.spans {
			names = append(names, s.Name)
			if s.Name == "redrive "+dlqQueue && spanAttr(s, "lily.outcome") == "redriven" && recv.names[i] == "lily-serve" &&
				s.Kind == tracepb.Span_SPAN_KIND_PRODUCER && spanAttr(s, "lily.redrive.actor") == "local" {
				n++
			}
		}
		return n == 2, fmt.Sprint(names)
	})
	if st := entryStates(t, db); st["redriven"] != 2 || st["pending"] != 4 {
		t.Errorf("states %v, want the 2 retries_exhausted entries redriven, 4 pending", st)
	}
	if code, out, stderr := run(t, "reconcile", "--db", db); code != 0 {
		t.Errorf("reconcile: exit %d %s %s", code, out, stderr)
	}
}

// TestDLQDecisionsExportTraces runs 'lily dlq triage' and 'lily dlq
// discard' with the standard OTEL_* variables: each entry decided is one
// span, exported under the command's service name, with the decision, the
// actor and the event ID, linked to the trace of the message (its stored
// traceparent).
func TestDLQDecisionsExportTraces(t *testing.T) {
	recv := startOTLPReceiver(t, "")
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	db, tr := newSeedStore(t)
	msgs := []transport.Message{
		{EventID: "traced-1", Body: []byte(`{}`), Headers: transport.Headers{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}},
		{EventID: "traced-2", Body: []byte(`{}`), Headers: transport.Headers{"traceparent": "00-" + traceID + "-00f067aa0ba902b8-01"}},
	}
	if err := tr.Publish(context.Background(), &transport.PublishParams{Queue: dlqQueue, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	deadLetterAll(t, tr, len(msgs), func(int, transport.Headers) evidence.Reason { return evidence.ReasonPermanent })
	tr.Close()
	if code, out, stderr := run(t, "dlq", "triage", "--db", db, "--event-ids", "traced-1", "--assign", "bob", "--actor", "alice"); code != 0 {
		t.Fatalf("triage: exit %d %s %s", code, out, stderr)
	}
	if code, out, stderr := run(t, "dlq", "discard", "--db", db, "--event-ids", "traced-1,traced-2", "--reason", "obsolete", "--actor", "alice"); code != 0 {
		t.Fatalf("discard: exit %d %s %s", code, out, stderr)
	}
	// The commands flush their spans before they exit.
	recv.mu.Lock()
	defer recv.mu.Unlock()
	got := map[string]int{}
	for i, s := range recv.spans {
		linked := len(s.Links) == 1 && hex.EncodeToString(s.Links[0].TraceId) == traceID
		if !linked || spanAttr(s, "lily.actor") != "alice" || spanAttr(s, "lily.decision") == "" {
			t.Errorf("span %q of %s: links %v, actor %q, decision %q: want one link to trace %s, actor alice, a decision",
				s.Name, spanAttr(s, "messaging.message.id"), s.Links, spanAttr(s, "lily.actor"), spanAttr(s, "lily.decision"), traceID)
		}
		got[recv.names[i]+" "+s.Name+" "+spanAttr(s, "messaging.message.id")]++
	}
	want := map[string]int{
		"lily-dlq-triage triage " + dlqQueue + " traced-1":   1,
		"lily-dlq-discard discard " + dlqQueue + " traced-1": 1,
		"lily-dlq-discard discard " + dlqQueue + " traced-2": 1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("spans exported %v, want %v", got, want)
	}
	// Conservation: both dead letters discarded with a record.
	if st := entryStates(t, db); st["discarded"] != 2 || len(st) != 1 {
		t.Errorf("states %v, want both entries discarded", st)
	}
}
