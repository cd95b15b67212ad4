// Package httpapi serves Lily's dead-letter work list over HTTP: a JSON API
// that mirrors 'lily dlq' (queues, entries with the same filters, one entry
// with decoded evidence, groups, redrive as a job with progress, discard,
// erase, expire, unpark, the audit log), /healthz, /metrics, its OpenAPI
// document at /api/openapi.json, and a web console (plain HTML, CSS and
// JavaScript embedded in the binary) at /.
//
// Access is by named tokens with a role (viewer, operator, admin): API
// clients send "Authorization: Bearer <secret>", the console logs in once
// and holds an HttpOnly, SameSite=Strict session cookie, and its writes
// carry a per-session CSRF token. The token's name is the actor of every
// audit record its requests write; a request refused for its role is
// answered 403 and audited too. Without tokens the server is for the local
// machine only: every request acts as "local" with the admin role, and
// requests naming another host are refused.
//
//	srv, err := httpapi.New(httpapi.Options{Store: store, Config: cfg, Tokens: tokens, Target: target})
//	...
//	http.ListenAndServe("127.0.0.1:8080", srv)
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lily-mq/lily"
	"github.com/lily-mq/lily/catalog"
	"github.com/lily-mq/lily/config"
	"github.com/lily-mq/lily/redrive"
	"github.com/lily-mq/lily/transport"
)

// RedriveObserver counts redriven entries by outcome (lilyprom.Hook is
// one); dry runs are not reported.
type RedriveObserver interface {
	Redrive(queue, outcome string)
}

// Options configure a Server. Store is required; the zero value of every
// other field is usable.
type Options struct {
	// Store is the dead-letter catalog. Required.
	Store *catalog.Store
	// JobLease is how long the runner lease of a redrive job this server
	// runs lasts unrenewed: when the server dies mid-job, another runner
	// resumes the job after it. Defaults to redrive.DefaultJobLease.
	JobLease time.Duration
	// TracerProvider, when set, traces the redrives the API runs
	// (redrive.Redriver.TracerProvider): each redriven message gets a
	// producer span in its own trace, linked to the request's span; and
	// the other decisions (discard, erase, edit, triage): a span per entry
	// in the request's context, linked to the message's trace
	// (catalog.Store.WithTracerProvider).
	TracerProvider trace.TracerProvider
	// Config supplies each queue's owner, dlq_retention_hours and
	// max_redrives; a queue not in it has the defaults. Defaults to an
	// empty configuration.
	Config config.Config
	// Tokens are the credentials that may use the server. Defaults to
	// none: local mode (actor "local", admin role, loopback host names
	// only; 'lily serve' refuses a non-loopback address then).
	Tokens []Token
	// Target returns the transport that publishes a redrive into a queue,
	// as 'lily dlq redrive' resolves it. Defaults to nil: redrives other
	// than dry runs are refused with 501.
	Target func(ctx context.Context, queue string) (redrive.Publisher, error)
	// Tick, if set, runs while a redrive sample is watched, with the
	// queues it went to: e.g. ingesting their broker DLQs. Defaults to nil.
	Tick func(ctx context.Context, queues []string) error
	// InFlight counts the messages each queue still holds, for the ledger
	// (/api/ledger, /healthz). Defaults to nil: in flight taken as zero.
	InFlight transport.InFlightCounter
	// Metrics is served at /metrics (e.g. lilyprom.Handler). Defaults to
	// nil: /metrics answers 404.
	Metrics http.Handler
	// Redrives counts redriven entries (e.g. a lilyprom.Hook). Defaults
	// to nil.
	Redrives RedriveObserver
	// Parker lists and unparks held keys (ordering "park" and "block").
	// Defaults to the catalog itself (redrive.Keys: HeldKeys, Unpark).
	Parker Parker
	// Logger receives request errors and job outcomes. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// SecureCookies marks the session cookie Secure on every response
	// (serve behind TLS). Defaults to false: the cookie is Secure when the
	// request came over TLS (r.TLS), or, with TrustProxy, when the proxy
	// in front says it did.
	SecureCookies bool
	// TrustProxy trusts the X-Forwarded-Proto header of requests: "https"
	// means a TLS-terminating proxy in front received the request over
	// TLS, so the session cookie is marked Secure. Set it only when every
	// request comes through such a proxy (a client could send the header
	// itself). Defaults to false: the header is ignored.
	TrustProxy bool
	// MaxImportLine bounds one line of POST /api/import in bytes: a longer
	// line is answered 413 as soon as the bound is passed, without reading
	// the line whole. Defaults to catalog.MaxImportLine (64 MiB).
	MaxImportLine int
	// MaxImports is how many imports may run at once; one more is
	// answered 429. Defaults to 2.
	MaxImports int
	// SessionTTL is how long a console login lasts. Defaults to 12h.
	SessionTTL time.Duration
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
}

// Server is the HTTP API and console; it is an http.Handler.
type Server struct {
	o        Options
	mux      *http.ServeMux
	tokens   []Token
	sessions *sessions
	jobs     *jobs
	routes   []route
	imports  chan struct{} // a slot per running import (MaxImports)
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

var _ http.Handler = (*Server)(nil)

// New builds the server. Tokens are checked (names unique, roles known,
// secrets long enough) and every problem is reported at once.
func New(o Options) (*Server, error) {
	if o.Store == nil {
		return nil, errors.New("httpapi: Options.Store is required")
	}
	if err := CheckTokens(o.Tokens); err != nil {
		return nil, err
	}
	if o.TracerProvider != nil {
		o.Store = o.Store.WithTracerProvider(o.TracerProvider)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = 12 * time.Hour
	}
	if o.MaxImportLine <= 0 {
		o.MaxImportLine = catalog.MaxImportLine
	}
	if o.MaxImports <= 0 {
		o.MaxImports = 2
	}
	o.Config = o.Config.WithDefaults()
	s := &Server{o: o, mux: http.NewServeMux(), tokens: o.Tokens, sessions: newSessions(), jobs: newJobs(o.JobLease),
		imports: make(chan struct{}, o.MaxImports)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.routes = s.apiRoutes()
	for _, rt := range s.routes {
		s.mux.Handle(rt.method+" "+rt.path, s.guard(rt))
	}
	s.mountConsole()
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.Header().Set("X-Frame-Options", "DENY")
	if s.local() && !loopbackHost(r.Host) {
		writeError(w, http.StatusForbidden, apiError{Error: fmt.Sprintf(
			"host %q refused: without tokens the server answers only for localhost, 127.0.0.1 or [::1] (configure [[token]] entries or LILY_TOKENS to serve other names)", r.Host),
			Field: "Host"})
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Close stops the redrive jobs this server runs and waits for them: each
// stops after its current batch and is released, not cancelled, so that
// another runner ('lily serve') resumes it after its last handled entry.
func (s *Server) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

// Route is one API route: an HTTP method and a ServeMux path pattern.
type Route struct {
	Method, Path string
}

// Routes lists the API routes the server registers (besides the console's
// pages and assets), each documented in the OpenAPI document.
func (s *Server) Routes() []Route {
	out := make([]Route, len(s.routes))
	for i, rt := range s.routes {
		out[i] = Route{Method: rt.method, Path: rt.path}
	}
	return out
}

// route is one registered API route with the permission it needs.
type route struct {
	method, path string
	perm         permission
	h            func(w http.ResponseWriter, r *http.Request, p *principal)
}

// apiRoutes is the table of every API route.
func (s *Server) apiRoutes() []route {
	return []route{
		{"GET", "/healthz", permPublic, s.handleHealth},
		{"GET", "/metrics", permPublic, s.handleMetrics},
		{"GET", "/api/openapi.json", permPublic, handleOpenAPI},
		{"POST", "/login", permPublic, s.handleLogin},
		{"POST", "/logout", permPublic, s.handleLogout},
		{"GET", "/api/session", permRead, s.handleSession},
		{"GET", "/api/queues", permRead, s.handleQueues},
		{"GET", "/api/ledger", permRead, s.handleLedger},
		{"GET", "/api/timeline", permRead, s.handleTimeline},
		{"GET", "/api/entries", permRead, s.handleEntries},
		{"GET", "/api/entries/{id}", permRead, s.handleEntry},
		{"GET", "/api/groups", permRead, s.handleGroups},
		{"GET", "/api/audit", permRead, s.handleAudit},
		{"POST", "/api/redrives", permRedrive, s.handleRedrive},
		{"GET", "/api/redrives", permRead, s.handleJobs},
		{"GET", "/api/redrives/{id}", permRead, s.handleJob},
		{"POST", "/api/redrives/{id}/cancel", permRedrive, s.handleCancel},
		{"POST", "/api/discard", permDiscard, s.handleDiscard},
		{"POST", "/api/erase", permErase, s.handleErase},
		{"POST", "/api/expire", permExpire, s.handleExpire},
		{"GET", "/api/parked", permRead, s.handleParked},
		{"POST", "/api/queues/{queue}/parked/{key}/unpark", permUnpark, s.handleUnpark},
		{"POST", "/api/entries/{id}/edit", permEdit, s.handleEdit},
		{"GET", "/api/rules", permRead, s.handleRules},
		{"POST", "/api/triage", permTriage, s.handleTriage},
		{"GET", "/api/search", permRead, s.handleSearch},
		{"GET", "/api/export", permRead, s.handleExport},
		{"POST", "/api/import", permImport, s.handleImport},
		{"GET", "/api/consumers", permRead, s.handleConsumers},
		{"POST", "/api/queues/{queue}/pause", permPause, s.handlePause},
		{"POST", "/api/queues/{queue}/resume", permPause, s.handleResume},
	}
}

// queue returns a queue's configuration: the config's [[queue]], or the
// defaults.
func (s *Server) queue(name string) lily.QueueConfig {
	if q, ok := s.o.Config.Queue(name); ok {
		return q
	}
	return lily.QueueConfig{Name: name}.WithDefaults()
}

func (s *Server) retention(name string) time.Duration {
	return time.Duration(s.queue(name).Settings().DLQRetentionHours) * time.Hour
}

func (s *Server) maxRedrives(name string) int { return s.queue(name).Settings().MaxRedrives }

// apiError is the body of every error answer: what was wrong, naming the
// field (a query parameter, a JSON member, a header) when one was.
type apiError struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

// fieldError is a bad request naming its field.
type fieldError struct {
	field, msg string
}

func (e *fieldError) Error() string { return e.msg }

// badField returns a 400 error naming field; the message should give the
// value and the fix.
func badField(field, format string, args ...any) error {
	return &fieldError{field: field, msg: fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	writeJSON(w, status, e)
}

// fail answers err: 400 for a fieldError, 404 for catalog.ErrNotFound,
// 500 (logged) otherwise.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var fe *fieldError
	switch {
	case errors.As(err, &fe):
		writeError(w, http.StatusBadRequest, apiError{Error: fe.msg, Field: fe.field})
	case errors.Is(err, catalog.ErrNotFound):
		writeError(w, http.StatusNotFound, apiError{Error: err.Error()})
	default:
		s.o.Logger.Error("httpapi: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, apiError{Error: err.Error()})
	}
}

// decodeBody reads a JSON request body into v: unknown members are
// errors naming them.
func decodeBody(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !isJSON(ct) {
		return badField("Content-Type", "Content-Type %q: send the request body as application/json", ct)
	}
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badField("body", "request body: %v (send one JSON object; see /api/openapi.json)", err)
	}
	return nil
}

func isJSON(ct string) bool {
	return len(ct) >= 16 && ct[:16] == "application/json"
}
