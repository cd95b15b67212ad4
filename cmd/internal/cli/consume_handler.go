package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"go.opentelemetry.io/otel/propagation"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/cmd/internal/report"
	"github.com/lily-mq/lily/evidence"
	"github.com/lily-mq/lily/transport"
)

// The sidecar's handler contract (documented in 'lily consume --help' and
// docs/sidecar.md).
const (
	// statusPermanent is the HTTP status that dead-letters at once.
	statusPermanent = http.StatusUnprocessableEntity
	// exitPermanent is the exit code that dead-letters at once
	// (sysexits.h EX_DATAERR: the input data was incorrect).
	exitPermanent = 65
	// errorTextMax is how much of an answer or of stderr becomes the
	// error text (the evidence keeps at most 1 KiB of it, redacted).
	errorTextMax = 2048
)

// handlerAnswer is the JSON answer a handler may give: its outcome and
// error text.
type handlerAnswer struct {
	Outcome string `json:"outcome"`
	Error   string `json:"error"`
}

// HTTPAnswerError is an HTTP handler's failure answer: the status and the
// error text it gave.
type HTTPAnswerError struct {
	Status int
	Text   string
}

func (e *HTTPAnswerError) Error() string {
	if e.Text == "" {
		return "handler answered " + strconv.Itoa(e.Status) + " " + http.StatusText(e.Status)
	}
	return "handler answered " + strconv.Itoa(e.Status) + ": " + e.Text
}

// CommandExitError is a handler command's failure: its exit code and the tail of its
// stderr.
type CommandExitError struct {
	Code int
	Text string
}

func (e *CommandExitError) Error() string {
	if e.Text == "" {
		return "handler command exited " + strconv.Itoa(e.Code)
	}
	return "handler command exited " + strconv.Itoa(e.Code) + ": " + e.Text
}

// deliveryMeta is a delivery's metadata as (name, value) pairs, in the
// order they are documented; names are the HTTP header names (the
// environment variable is LILY_ + upper snake case).
func deliveryMeta(d *lily.Delivery) [][2]string {
	m := [][2]string{
		{"Event-Id", d.EventID},
		{"Queue", d.Queue},
		{"Delivery-Count", strconv.Itoa(d.DeliveryCount)},
		{"Retry-Count", strconv.Itoa(d.RetryCount)},
		{"Redrive-Count", strconv.Itoa(d.RedriveCount)},
	}
	if d.Key != "" {
		m = append(m, [2]string{"Key", d.Key})
	}
	if d.Type != "" {
		m = append(m, [2]string{"Type", d.Type})
	}
	if d.SchemaVersion > 0 {
		m = append(m, [2]string{"Schema-Version", strconv.Itoa(d.SchemaVersion)})
	}
	m = append(m, [2]string{"Headers", headersJSON(d.Headers)})
	return m
}

// headersJSON renders the message headers as one JSON object: strings,
// numbers, booleans, lists and tables as JSON values, byte arrays as
// base64, times as RFC 3339; a value JSON cannot hold (NaN) as its typed
// text.
func headersJSON(h transport.Headers) string {
	if len(h) == 0 {
		return "{}"
	}
	if b, err := json.Marshal(h); err == nil {
		return string(b)
	}
	out := make(map[string]any, len(h))
	for k, v := range h {
		if _, err := json.Marshal(v); err != nil {
			out[k] = evidence.FormatRaw(v)
		} else {
			out[k] = v
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// printable returns s as valid UTF-8 without control characters (an
// answer may be binary garbage), at most errorTextMax bytes; tail keeps
// the end instead of the start.
func printable(b []byte, tail bool) string {
	if len(b) > errorTextMax {
		if tail {
			b = b[len(b)-errorTextMax:]
		} else {
			b = b[:errorTextMax]
		}
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return ' '
		}
		if unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// httpHandler POSTs each delivery to an endpoint.
type httpHandler struct {
	url     string
	client  *http.Client
	maxBody int64
}

func newHTTPHandler(url string, maxBody int64) *httpHandler {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	// No client timeout: the runtime's handler_timeout cancels the
	// request's context.
	return &httpHandler{url: url, client: &http.Client{Transport: tr}, maxBody: maxBody}
}

// Handle implements lily.Handler.
func (h *httpHandler) Handle(ctx context.Context, d *lily.Delivery) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(d.Body))
	if err != nil {
		return fmt.Errorf("build the request to %s: %w", report.RedactedURL(h.url), err)
	}
	ct := "application/octet-stream"
	if v, ok := d.Headers["content-type"].(string); ok && v != "" {
		ct = v
	}
	req.Header.Set("Content-Type", ct)
	for _, kv := range deliveryMeta(d) {
		req.Header.Set("Lily-"+kv[0], kv[1])
	}
	// The attempt's span (when tracing) is the endpoint's parent.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("POST %s: no answer before the handler timeout: %w", report.RedactedURL(h.url), ctx.Err())
		}
		if connDropped(err) {
			return lily.Crashed(fmt.Errorf("POST %s: the handler dropped the connection without an answer: %w", report.RedactedURL(h.url), err))
		}
		return fmt.Errorf("POST %s: %w", report.RedactedURL(h.url), err)
	}
	defer resp.Body.Close()
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, h.maxBody))
	if rerr != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("POST %s: answer %d not read before the handler timeout: %w", report.RedactedURL(h.url), resp.StatusCode, ctx.Err())
		}
		if connDropped(rerr) {
			return lily.Crashed(fmt.Errorf("POST %s: the handler dropped the connection in the middle of its answer (%d): %w", report.RedactedURL(h.url), resp.StatusCode, rerr))
		}
		return fmt.Errorf("POST %s: read the answer (%d): %w", report.RedactedURL(h.url), resp.StatusCode, rerr)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" && len(bytes.TrimSpace(body)) > 0 {
		var a handlerAnswer
		if err := json.Unmarshal(body, &a); err != nil {
			return &HTTPAnswerError{Status: resp.StatusCode, Text: "answer is not the JSON {\"outcome\": ..., \"error\": ...} (" + err.Error() + "): " + printable(body, false)}
		}
		switch a.Outcome {
		case "ack":
			return nil
		case "permanent":
			return lily.Permanent(&HTTPAnswerError{Status: resp.StatusCode, Text: printable([]byte(a.Error), false)})
		case "transient", "retry":
			return &HTTPAnswerError{Status: resp.StatusCode, Text: printable([]byte(a.Error), false)}
		case "":
			// No outcome: the status decides, the error text is a.Error.
			body = []byte(a.Error)
		default:
			return &HTTPAnswerError{Status: resp.StatusCode, Text: fmt.Sprintf("answer outcome %q: want ack, permanent or transient; %s", a.Outcome, printable([]byte(a.Error), false))}
		}
	}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode == statusPermanent:
		return lily.Permanent(&HTTPAnswerError{Status: resp.StatusCode, Text: printable(body, false)})
	}
	return &HTTPAnswerError{Status: resp.StatusCode, Text: printable(body, false)}
}

// connDropped reports an HTTP exchange the peer cut without an answer: a
// reset or a close, what a handler process that died leaves behind (a
// refused connection is a handler that is not up: transient).
func connDropped(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.EPIPE)
}

// execHandler runs a command per delivery.
type execHandler struct {
	command string
}

func newExecHandler(command string) *execHandler { return &execHandler{command: command} }

// tailBuffer keeps the last errorTextMax bytes written to it.
type tailBuffer struct {
	b []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 2*errorTextMax {
		t.b = append(t.b[:0], t.b[len(t.b)-errorTextMax:]...)
	}
	return len(p), nil
}

// Handle implements lily.Handler.
func (h *execHandler) Handle(ctx context.Context, d *lily.Delivery) error {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", h.command)
	cmd.Stdin = bytes.NewReader(d.Body)
	var stderr tailBuffer
	cmd.Stderr = &stderr
	env := os.Environ()
	for _, kv := range deliveryMeta(d) {
		env = append(env, "LILY_"+strings.ToUpper(strings.ReplaceAll(kv[0], "-", "_"))+"="+kv[1])
	}
	// The attempt's span (when tracing) as TRACEPARENT and TRACESTATE,
	// OpenTelemetry's environment carrier for child processes.
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	for k, v := range carrier {
		env = append(env, strings.ToUpper(k)+"="+v)
	}
	cmd.Env = env
	ownProcessGroup(cmd)
	// A child that keeps stderr open after the group was killed must not
	// hold the handler.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	text := printable(stderr.b, true)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("handler command killed (its process group) at the handler timeout: %w; stderr: %s", ctx.Err(), text)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("run the handler command: %w", err)
	}
	if sig, ok := killedBy(ee); ok {
		return lily.Crashed(fmt.Errorf("handler command killed by signal %s: %s", sig, text))
	}
	e := &CommandExitError{Code: ee.ExitCode(), Text: text}
	if e.Code > 128 && e.Code <= 128+64 {
		// The shell's report of a child killed by signal code-128.
		return lily.Crashed(fmt.Errorf("handler command killed by signal %d (the shell exited %d): %s", e.Code-128, e.Code, text))
	}
	if e.Code == exitPermanent {
		return lily.Permanent(e)
	}
	return e
}

// consumeCounts counts the runtime's outcomes for the summary.
type consumeCounts struct {
	acked, retried, dead, released, faults atomic.Int64
}

// Observe implements lily.Hook.
func (c *consumeCounts) Observe(_ context.Context, e lily.Event) {
	switch e.Kind {
	case lily.EventAcked, lily.EventDrillAcked: // a drill's redrive is an ack too, as the ledger counts it
		c.acked.Add(1)
	case lily.EventRetried:
		c.retried.Add(1)
	case lily.EventDeadLettered:
		c.dead.Add(1)
	case lily.EventReleased:
		c.released.Add(1)
	case lily.EventFault:
		c.faults.Add(1)
	}
}

func (c *consumeCounts) json(q lily.QueueConfig, handler string) consumeJSON {
	return consumeJSON{Queue: q.Name, Transport: q.Transport, Handler: handler, Acked: c.acked.Load(),
		Retried: c.retried.Load(), DeadLettered: c.dead.Load(), Released: c.released.Load(), Faults: c.faults.Load()}
}
